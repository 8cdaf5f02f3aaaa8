"""`drydock retrain SPEC`: the entry point for schedulers (cron, Kubernetes CronJob, Airflow).

It answers one question cheaply — did anything that decides the result change since the last
successful run? — by comparing fingerprints of the spec, the tokenized data and the teacher with
those the last success recorded in `<workdir>/<name>/retrain.json` (`RETRAIN_FILE`). A hub teacher or hub dataset
counts by the commit its revision names now (resolved once, `pipeline.prepare.revisions`, and the
sweep then runs with those commits), so a push to its branch is a change. Nothing changed: exit 0
in seconds and say so. Something changed: run the sweep (its stages reuse whatever is still
valid: cached data, cached teacher), which measures, selects, registers, and moves `champion`
only on improvement. The spec's lock (`pipeline.lock`), which `drydock sweep` takes too, keeps
two overlapping runs from both writing: the second does not wait.

Exit codes a scheduler can act on: 0 done or nothing to do; 2 bad spec or data (a person must
fix something; retrying will not help); 1 the run failed or another run of the spec (a retrain
or a sweep) holds the lock ("skipped", with the holder). A one-line summary goes to stdout.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.config import SweepSpec
from pipeline.lock import spec_lock
from pipeline.workdir import RETRAIN_FILE, atomic_write, fingerprint_settings


def fingerprints(spec: SweepSpec, workdir: Path, *, pinned: SweepSpec | None = None) -> dict[str, str]:
    """What decides a sweep's outcome: the spec (minus where it runs), the data, the teacher.

    The spec counts as written (`teacher.revision: main` stays `main`); the data and the teacher
    count at the commits a hub dataset's and a hub teacher's revisions name now, resolved here or
    given as `pinned` (`pin_revisions(spec)`, which the sweep then runs with)."""
    from pipeline.prepare.cache import folder_digest
    from pipeline.prepare.revisions import pin_revisions
    from pipeline.prepare.stage import prepare
    from pipeline.training.teacher import teacher_key

    pinned = pinned or pin_revisions(spec)
    prepared = prepare(pinned, workdir)
    given = spec.teacher.finetuned
    return {
        "spec": spec_fingerprint(spec),
        "data": prepared.data.fingerprint,
        # a given teacher by its files: a nightly-refreshed checkpoint at the same path is a change
        "teacher": teacher_key(pinned, prepared) if not given else f"given:{folder_digest(Path(given))}",
    }


def spec_fingerprint(spec: SweepSpec) -> str:
    """The spec's part of the fingerprints: its fields that decide the study, as the spec's fields
    declare it (`pipeline.workdir.Counts`: not where it runs, keeps its records or finds its
    inputs, whose contents count instead; a field added later, at the value a spec written before
    it gets, is left out, so an unchanged spec keeps the fingerprint its last run recorded). The
    spec counts as written (`teacher.revision: main` stays `main`); the commits count in the
    data's and the teacher's fingerprints."""
    return hashlib.sha256(json.dumps(fingerprint_settings(spec), sort_keys=True).encode()).hexdigest()[:16]


def _read_state(sweep_dir: Path) -> dict[str, Any]:
    path = sweep_dir / RETRAIN_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    atomic_write(sweep_dir / RETRAIN_FILE, json.dumps(state, indent=2))


def retrain(spec: SweepSpec, workdir: str | Path, *, address: str | None = None,
            log: Callable[[str], None] = print) -> tuple[str, dict[str, Any]]:
    """Returns (what happened: "unchanged" | "retrained", details for the summary line)."""
    from pipeline.storage import WorkStore

    store = WorkStore.open(workdir)  # a folder (its own local folder) or a URI (this node's folder for it)
    store.check_writable()  # before the lock, which makes a folder there
    workdir = store.local
    sweep_dir = workdir / spec.name  # the lock's folder, as `drydock sweep` takes it (pipeline.lock)
    with spec_lock(sweep_dir, f"drydock retrain {spec.name}"):
        from pipeline.prepare.revisions import pin_revisions  # after the lock: a skip costs no heavy import
        from pipeline.sweep import run_sweep

        pinned = pin_revisions(spec)  # once: the fingerprints and the sweep see the same commits
        current = fingerprints(spec, workdir, pinned=pinned)
        store.fetch(f"{spec.name}/{RETRAIN_FILE}", fresh=True)  # a URI's record, as the last success left it
        last = _read_state(sweep_dir)
        if last.get("fingerprints") == current:
            return "unchanged", {"since": last.get("finished_at"), "champion": last.get("champion")}
        changed = sorted(k for k in current if last.get("fingerprints", {}).get(k) != current[k])
        log(f"retrain: {', '.join(changed)} changed since the last successful run; running the sweep")
        frame = run_sweep(pinned, store.location, address=address, log=log)
        finished = frame[frame["status"] == "finished"] if len(frame) else frame
        if not len(finished):
            raise RuntimeError("no trial finished; nothing to select or register")
        champion = _champion(spec, workdir)
        _write_state(sweep_dir, {"fingerprints": current, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "champion": champion})
        store.push(f"{spec.name}/{RETRAIN_FILE}")
        return "retrained", {"changed": changed, "trials": len(frame), "finished": len(finished), "champion": champion}


def _champion(spec: SweepSpec, workdir: Path) -> str | None:
    """`name@champion -> version N` as the registry now says, for the summary line."""
    try:
        from mlflow import MlflowClient

        from pipeline.select.champion import CHAMPION
        from pipeline.tracking import tracking_uri

        client = MlflowClient(tracking_uri(spec, workdir))
        version = client.get_model_version_by_alias(spec.registered_model_name, CHAMPION)
        return f"{spec.registered_model_name} v{version.version}"
    except Exception:  # no registry entry yet (nothing selected) is not a failure of retrain
        return None


def summary_line(outcome: str, details: dict[str, Any], spec: SweepSpec) -> str:
    if outcome == "unchanged":
        return f"drydock retrain {spec.name}: nothing changed since {details.get('since')}; champion {details.get('champion') or 'none'}"
    return (
        f"drydock retrain {spec.name}: retrained ({', '.join(details['changed'])} changed); "
        f"{details['finished']}/{details['trials']} trials finished; champion {details.get('champion') or 'none'}"
    )
