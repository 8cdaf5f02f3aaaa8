"""What the API's calls return: plain, typed records a notebook shows and a script reads.

They hold what the CLI prints (its tables are built from them), so that a caller never has to
parse the command's output or know where in the work directory a file is kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

Text = str | tuple[str, str]  # one text, or a sentence pair for a pair task (MNLI, QQP, …)


@dataclass(frozen=True)
class Student:
    """A compressed student loaded as its consumers load it (a transformers pipeline over the
    exported folder, or the registry's MLflow pyfunc: eager, ONNX Runtime or its int8 variant,
    as registered), ready to label text."""

    ref: str  # the folder or `models:/NAME@champion` / `models:/NAME/VERSION` it was loaded from
    _predict: Callable[[list[Any]], pd.DataFrame] = field(repr=False)

    def predict(self, texts: Sequence[Text]) -> pd.DataFrame:
        """One row per text: `label` (the task's label name) and `score` (its probability; the
        predicted value for a regression task)."""
        return self._predict([list(t) if isinstance(t, tuple) else t for t in texts])

    __call__ = predict


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its trials, its front, its champion, and where its files are.

    Locations are the work directory's (a folder's paths, or `s3://…` URIs for a bucket)."""

    name: str  # the spec's name: the sweep's folder under the work directory
    results: pd.DataFrame  # one row per trial (docs/outputs.md: the results table's columns)
    front: pd.DataFrame  # the Pareto-optimal configurations in eager fp32, fastest first (seeds aggregated)
    # `models:/NAME@champion`, or None when no student was registered; with runtime variants it is
    # chosen among them (`runtimes_table`), so it may be a configuration's int8 variant
    champion: str | None
    champion_version: str | None
    tracking_uri: str  # the MLflow store the runs and the registry are in
    results_file: str
    report: str  # report.md; report.html beside it
    plot: str  # pareto.png
    front_table: str = field(repr=False)  # the front as the CLI prints it (◆ marks the champion)
    # variants.parquet: every model in every runtime of `selection.runtimes` (ONNX Runtime int8, …)
    # with its own dev metric and timing, and its front; None when only eager fp32 was timed
    variants: pd.DataFrame | None = field(default=None, repr=False)
    runtimes_table: str = field(default="", repr=False)  # the variants as the CLI prints them (★ front, ◆ champion)

    @property
    def failed(self) -> int:
        """Trials that failed (their error is in the results' `error` column)."""
        return int((self.results["status"] == "failed").sum()) if len(self.results) else 0

    def _repr_markdown_(self) -> str:  # a notebook shows the front and the champion
        champion = f"`{self.champion}` (version {self.champion_version})" if self.champion else "none"
        return (f"**sweep {self.name}**: {len(self.results)} trials, {self.failed} failed; champion {champion}\n\n"
                f"```\n{self.front_table}{self.runtimes_table}```\nplot: `{self.plot}`, report: `{self.report}`")


@dataclass(frozen=True)
class TrainResult:
    """One configuration trained in this process (`drydock train`)."""

    method: str
    metrics: dict[str, Any]  # metrics.json: the dev metric, sizes, steps, seconds, export check
    student: Path  # the exported, physically smaller student folder


@dataclass(frozen=True)
class RetrainResult:
    """`drydock retrain`: whether the sweep ran again and why, for a scheduler's log."""

    outcome: str  # "unchanged" or "retrained"
    details: dict[str, Any]  # changed: what changed; champion: `NAME vN`; trials, finished
    summary: str  # the one line the CLI prints


@dataclass(frozen=True)
class MethodParam:
    default: Any
    description: str


@dataclass(frozen=True)
class MethodInfo:
    """A registered method plugin (`drydock methods`)."""

    name: str
    summary: str
    params: dict[str, MethodParam]
