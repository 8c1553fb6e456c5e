"""RISEBench by its official protocol (`metrics=rise`): the per-category prompts, replies parsed as the official
`extract`, solved / score per sample, accuracy per category and subtask (docs/judge.md, "RISEBench's protocol")."""
