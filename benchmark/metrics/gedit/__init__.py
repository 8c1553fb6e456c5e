"""GEdit-Bench by its official protocol (`metrics=gedit`): VIEScore's "tie" prompts, free-text replies parsed as the
official parser does, and the official aggregation (docs/judge.md, "GEdit-Bench's protocol")."""
