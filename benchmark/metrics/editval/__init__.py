"""EditVal's automatic evaluation: detector rules, DINO context preservation, FID per edit type."""
