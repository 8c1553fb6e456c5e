"""PIE-Bench's metric suite: structure distance, background PSNR / LPIPS / MSE / SSIM, CLIP similarity (whole,
edited), as PnP Inversion's evaluation computes them (docs/pie.md)."""
