"""EditScore (VectorSpaceLab) as a judge (`metrics=editscore`): Qwen2.5-VL-7B with the EditScore-7B LoRA, VIEScore's
reasoning-first tie prompts on a 0..25 scale, sampled replies parsed as the official parser, per-query scores as the
official `evaluate` (docs/judge.md, "EditScore")."""
