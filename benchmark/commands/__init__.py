"""The entry points: one module per `editmeter` subcommand (docs/architecture.md)."""
