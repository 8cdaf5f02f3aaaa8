"""The `drydock` command: `main` parses the arguments and dispatches to one module per group of
subcommands (`main` for validate/methods/train/sweep/retrain, `outputs` for what a sweep left:
report, registry, promote, eval) and `tables` for the tables they print; `demo` is `make demo`."""

from pipeline.cli.main import main

__all__ = ["main"]
