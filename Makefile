# drydock — `make demo` runs the main job end to end; `make test` sets up and runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch lies on this kind of machine's disk; a looser requirement pulls a
# multi-GB CUDA build, so it is installed first and pinned here, not in pyproject.toml.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# The test venv installs the versions the cluster image pins (cluster/constraints.txt), so a
# release on the index the day CI runs changes neither what the suite tests nor what the image
# ships. To move to newer versions: `make setup CONSTRAINTS=`, run the suite, then regenerate the
# pins with `.venv/bin/python cluster/freeze_constraints.py` and commit them.
CONSTRAINTS ?= -c cluster/constraints.txt

.PHONY: setup test test-slow test-all demo demo-picture lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile cluster/constraints.txt
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q $(CONSTRAINTS) -e ".[dev,demo]"
	@# No DeepSpeed op is compiled: on the CPU the loop keeps DeepSpeed from building its
	@# shared-memory all-reduce (pipeline/training/engine.py, skip_cpu_shm_build), which training never uses.
	touch $(STAMP)

# Two pytest workers, one test file each at a time: the Ray/MLflow integration tests spend half
# their wall time waiting on process start-up, so two of them overlap well on two cores. Files go
# out in the order tests/conftest.py gives them (longest first), not xdist's by-test-count order.
# `make test PYTEST_WORKERS=0` runs everything in one process.
#
# Two tiers (docs/development.md, "The two tiers"): `make test` runs every test not marked
# `slow` (unit, contract, and one real sweep through Ray and an MLflow server), under 10 minutes
# on two cores; `make test-slow` runs the `slow` ones: scenarios of several Ray sweeps each
# (kill and resume, a simulated cluster, retrain, the notebook). `.ci/run` runs both.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder) --durations=10
test: setup
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-slow: setup
	$(PYTEST) -m slow $(PYTEST_ARGS)

test-all: setup
	$(PYTEST) $(PYTEST_ARGS)

# SST-2 for the demo: the shared GLUE copy when it is there, else the hub.
SHARED_GLUE := $(abspath ../shared/data/glue)
DEMO_ENV := $(if $(wildcard $(SHARED_GLUE)/SST-2),GLUE_DIR=$${GLUE_DIR:-$(SHARED_GLUE)},)

demo: setup
	$(DEMO_ENV) $(BIN)/python -m pipeline.cli.demo $(DEMO_ARGS)

# The README's picture and front tables (docs/images/pareto.png): the demo in a fresh work
# directory, then its files put in place (python -m pipeline.cli.demo --picture).
DEMO_PICTURE_DIR ?= /tmp/drydock-demo-picture
demo-picture: setup
	rm -rf $(DEMO_PICTURE_DIR)
	$(DEMO_ENV) $(BIN)/python -m pipeline.cli.demo $(DEMO_PICTURE_DIR)
	$(BIN)/python -m pipeline.cli.demo --picture $(DEMO_PICTURE_DIR)

lint: setup
	$(BIN)/ruff check drydock pipeline methods tests benchmarks examples
	$(BIN)/mypy  # drydock/, pipeline/ and methods/, configured in pyproject.toml [tool.mypy]

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
