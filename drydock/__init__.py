"""drydock's Python API: the same sweep as `drydock sweep spec.yaml`, from a notebook, a script,
an Airflow task or a service.

    import drydock

    spec = drydock.load_spec("sweeps/quickstart.yaml", overrides={"train.epochs": 1})
    print(drydock.plan(spec))                     # trials, steps and a time estimate; validates too
    result = drydock.sweep(spec, workdir="runs")  # prepare → teacher → search → select
    print(result.front)                           # the Pareto-optimal configurations
    student = drydock.load_student(result.champion, tracking_uri=result.tracking_uri)
    student.predict(["a gripping, funny film", "dull and far too long"])

Each function is what one CLI command runs (the command calls it and prints what it returns):
`load_spec`, `validate`, `plan`, `sweep`, `train`, `retrain`, `methods`, and `load_student`
for what a consumer of the registry runs. Mistakes raise the typed errors below, which the CLI
maps to its exit codes (`DrydockError.exit_code`). No call changes the process's logging or
MLflow state for good: lines go to the `drydock` logger (printed when nothing else configured
logging, as in a notebook) and every level a call touches is put back when it returns.

`import drydock` is cheap: torch, Ray and MLflow are imported by the calls that need them.
"""

from drydock.api import load_spec, load_student, methods, plan, retrain, sweep, train, validate
from drydock.results import MethodInfo, RetrainResult, Student, SweepResult, TrainResult
from pipeline.errors import (
    DataError,
    DrydockError,
    SpecError,
    SweepInterrupted,
    SweepLocked,
    TrackingUnreachable,
)

__all__ = [
    "DataError",
    "DrydockError",
    "MethodInfo",
    "RetrainResult",
    "SpecError",
    "Student",
    "SweepInterrupted",
    "SweepLocked",
    "SweepResult",
    "TrackingUnreachable",
    "TrainResult",
    "load_spec",
    "load_student",
    "methods",
    "plan",
    "retrain",
    "sweep",
    "train",
    "validate",
]
