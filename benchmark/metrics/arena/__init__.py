"""Pairwise judging by GenArena's protocol (docs/arena.md): the pinned prompt module read as data, the reply parser,
the combination of a battle's two verdicts, Bradley-Terry ratings and the battle log."""
