"""I/O basics: files, locks, hashes, images, types and the formats every layer reads."""
