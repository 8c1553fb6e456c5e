"""Shared machinery of the diffusion editors: batching, image I/O, attention control, inversion, Imagic tuning."""
