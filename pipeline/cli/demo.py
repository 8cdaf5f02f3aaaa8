"""`make demo`: the quickstart end to end on this machine.

Runs `drydock sweep sweeps/quickstart.yaml` (the real all-MiniLM-L6-v2 teacher on SST-2: the
teacher stage, then the fine-tuning baseline and KD students on Ray) and prints the trial table.
SST-2 comes from $GLUE_DIR when set (the Makefile points it at ../shared/data/glue when that
exists), else from the Hugging Face hub.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.cli import main

if __name__ == "__main__":
    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs")
    sys.exit(main(["sweep", "sweeps/quickstart.yaml", "--workdir", str(workdir), *sys.argv[2:]]))
