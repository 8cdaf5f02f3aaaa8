# %% [markdown]
# # drydock from Python: the quickstart in a notebook
#
# The same job as `make demo` (`drydock sweep sweeps/quickstart.yaml`), called from Python:
# check the spec, see what it will cost, run the sweep, read the Pareto front, and label text
# with the champion the way a service loading `models:/<name>@champion` does.
#
# Run it as a notebook (VS Code, or `jupytext --to notebook examples/quickstart.py`) or as a
# script (`python examples/quickstart.py`) from the repository's root. It takes about 7 minutes
# on 2 CPUs; `DRYDOCK_EXAMPLE_SPEC=sweeps/smoke.yaml` runs the one-minute synthetic spec instead
# (the test suite does, `tests/integration/api/test_example.py`).

# %%
import importlib.util
import os

import drydock

SPEC = os.environ.get("DRYDOCK_EXAMPLE_SPEC", "sweeps/quickstart.yaml")
WORKDIR = os.environ.get("DRYDOCK_EXAMPLE_WORKDIR", "runs")

# %% [markdown]
# ## 1. Check the spec and see the plan
# A mistake raises `drydock.SpecError` listing every problem at once, before any work starts.

# %%
spec = drydock.load_spec(SPEC)
plan = drydock.plan(spec)
print(plan)

# %% [markdown]
# ## 2. Run the sweep
# Prepare the data, fine-tune the teacher (both cached), train every student on Ray, then
# measure their latency, pick the Pareto front and register it in MLflow with a `champion`.
# A second call with `resume=True` continues an interrupted run.

# %%
result = drydock.sweep(spec, workdir=WORKDIR)
result  # noqa: B018 - a notebook shows the front and the champion

# %% [markdown]
# ## 3. The front
# One row per Pareto-optimal configuration (seeds aggregated), fastest first; `result.results`
# has every trial, `result.plot` is the accuracy/latency plot, `result.report` the full report.

# %%
print(result.front[["config", "metric_mean", "latency_ms", "speedup", "num_params"]].to_string(index=False))
print(f"plot: {result.plot}\nreport: {result.report}")

# %%
if importlib.util.find_spec("IPython") and os.path.isfile(result.plot):  # in a notebook, for a local work directory
    from IPython.display import Image, display

    display(Image(result.plot))

# %% [markdown]
# ## 4. Label text with the champion
# Loaded from the registry the way a consumer loads it (MLflow's pyfunc, in the runtime it was
# registered for), not from drydock's training objects.

# %%
champion = drydock.load_student(result.champion, tracking_uri=result.tracking_uri)
predictions = champion.predict(["a gripping, funny and moving film", "dull, predictable and far too long"])
print(f"{result.champion} (version {result.champion_version}):")
print(predictions)
