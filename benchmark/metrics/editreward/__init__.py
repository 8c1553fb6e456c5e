"""EditReward (TIGER-Lab) as a judge (`metrics=editreward`): the authors' reward model scores each (instruction,
source, edit) with their prompts, preprocessing and forward (docs/judge.md, "EditReward")."""
