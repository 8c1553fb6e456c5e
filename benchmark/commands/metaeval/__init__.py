"""Meta-evaluation: how far each metric editmeter has agrees with ground truth and with people (docs/metaeval.md).

`editmeter metaeval gt-selection | 2afc | winrate | fit-weights` (benchmark.commands.metaeval.cli). Heavy modules are imported
by the subcommand that needs them.
"""
