"""`python -m pipeline.cli …` is `drydock …`."""

from pipeline.cli.main import main

raise SystemExit(main())
