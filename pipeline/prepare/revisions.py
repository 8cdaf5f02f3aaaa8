"""A spec's hub inputs pinned to commits, and the record of which commits a run used.

A sweep runs for hours in many processes; `main` of a hub teacher or dataset may move meanwhile.
Resolved once when the sweep (or `drydock retrain`) starts and written into the spec every stage
and Train worker receives, the revisions name one commit everywhere: in the fingerprints, the
teacher's cache key, the weights and rows loaded, the MLflow parent run's parameters, the
registry's version tags and each export's `drydock.json`.
"""

from __future__ import annotations

from typing import Any

from pipeline.config import SweepSpec
from pipeline.prepare.hub_datasets import dataset_revision, pinned_task
from pipeline.prepare.models import teacher_revision


def pin_revisions(spec: SweepSpec) -> SweepSpec:
    """`spec` with `teacher.revision` and `task.hub_revision` replaced by the commits they name
    now, where the teacher or the data comes from the hub (nothing else changes)."""
    update: dict[str, Any] = {}
    revision = teacher_revision(spec.teacher)
    if revision is not None and revision != spec.teacher.revision:
        update["teacher"] = spec.teacher.model_copy(update={"revision": revision})
    task = pinned_task(spec.task)
    if task is not spec.task:
        update["task"] = task
    return spec.model_copy(update=update) if update else spec


def source_revisions(spec: SweepSpec, data_revision: str | None = None) -> dict[str, str]:
    """`teacher_revision` and `data_revision`, the commits of the hub teacher and the hub dataset
    (`data_revision`: the one the prepared data came from, when known); absent when not from the
    hub. Quick for a pinned spec: a commit needs no resolving."""
    found = {"teacher_revision": teacher_revision(spec.teacher), "data_revision": data_revision or dataset_revision(spec.task)}
    return {key: value for key, value in found.items() if value is not None}
