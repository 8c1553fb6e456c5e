"""The conventional edit metrics as one suite: CLIP-T, CLIP-I, directional CLIP (= MD), DINO, LPIPS, pixel statistics,
masked and ground-truth variants (docs/metrics.md)."""
