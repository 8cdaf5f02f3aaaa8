"""The `drydock` command: `main` parses the arguments and dispatches to one module per group of
subcommands (`main` for validate/plan/methods/train/sweep/retrain, `outputs` for what a sweep left:
report, registry, promote, eval), `plan` for what a spec will cost, and `tables` for the tables
they print; `demo` is `make demo`."""

from pipeline.cli.main import main

__all__ = ["main"]
