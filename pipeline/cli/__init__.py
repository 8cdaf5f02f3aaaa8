"""The `drydock` command: `main` parses the arguments and dispatches to one module per group of
subcommands (`run` for validate/methods/train/sweep/retrain, `outputs` for what a sweep left)."""

from pipeline.cli.main import main

__all__ = ["main"]
