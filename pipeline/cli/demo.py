"""`make demo`: the quickstart end to end on this machine, in under 10 minutes on 2 CPUs.

Runs `drydock sweep sweeps/quickstart.yaml`: the real all-MiniLM-L6-v2 teacher fine-tuned on
SST-2, then three 3-layer students on Ray (the fine-tuning baseline, Hinton KD and
BERT-of-Theseus), their latency against the teacher, the Pareto front, the report and the
registry with its `champion` alias; it prints the trial table and the Pareto table. The longer
study (8,000 sentences, 500 steps a model, about 37 minutes) is `sweeps/quickstart-full.yaml`:
`python -m pipeline.cli.demo runs --full` runs it. SST-2 comes from $GLUE_DIR when set (the
Makefile points it at ../shared/data/glue when that exists), else from the Hugging Face hub.

    python -m pipeline.cli.demo [WORKDIR] [--full] [drydock sweep options...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.cli import main

SPEC = "sweeps/quickstart.yaml"
FULL_SPEC = "sweeps/quickstart-full.yaml"


def demo_args(argv: list[str]) -> list[str]:
    """The `drydock` command line for `argv` (a work directory first, `--full` anywhere)."""
    spec = FULL_SPEC if "--full" in argv else SPEC
    rest = [a for a in argv if a != "--full"]
    workdir = Path(rest.pop(0)) if rest and not rest[0].startswith("-") else Path("runs")
    return ["sweep", spec, "--workdir", str(workdir), *rest]


if __name__ == "__main__":
    sys.exit(main(demo_args(sys.argv[1:])))
