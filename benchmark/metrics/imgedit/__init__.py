"""ImgEdit-Bench Basic by its official protocol (`metrics=imgedit`): the per-type prompts, replies parsed as the
official step 1 does, and the official per-type and overall means (docs/judge.md, "ImgEdit-Bench's protocol")."""
