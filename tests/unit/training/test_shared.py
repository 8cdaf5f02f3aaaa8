"""Work shared across trials (pipeline/training/shared.py): one trial builds, the others wait and load."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from methods.base import Method, MethodContext, Phase, SharedWork, StudentDefaults, TaskInfo
from pipeline.training import loop
from pipeline.training.engine import Distributed
from pipeline.training.shared import SharedWorkCache, artifact_name

ONE_RANK = Distributed()


class Counting(Method):
    """A method whose shared work is one number, made in phase "make" and used in phase "use"."""

    name = "counting"

    def __init__(self, key: str = "a", value: float = 0.0):
        super().__init__({}, MethodContext(task=TaskInfo("t", 2, False), teacher=None, load_pretrained=lambda: None))
        self.key, self.value, self.loaded_from = key, value, None

    def build(self) -> nn.Module:
        self.model = nn.Linear(1, 1)
        return self.model

    def shared_work(self) -> SharedWork:
        return SharedWork(key={"key": self.key}, produced_by=("make",))

    def save_shared(self, folder: Path) -> None:
        (folder / "value.json").write_text(json.dumps(self.value))

    def load_shared(self, folder: Path) -> None:
        self.value, self.loaded_from = json.loads((folder / "value.json").read_text()), folder

    def phases(self, total_steps: int) -> list[Phase]:
        return [Phase("make", 0 if self.loaded_from else 2, ("w",)), Phase("use", total_steps, ("w",))]

    def param_groups(self, phase):
        return []

    def loss(self, batch, progress):
        return {}

    def eval_model(self):
        return self.model

    def export(self):
        return self.model


def lock_is_free(root: Path) -> bool:
    (lock,) = root.glob("*.lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def build_and_publish(method: Counting, root: Path, value: float, scope: str = "teacher-key") -> SharedWorkCache:
    """What the loop does for a trial that builds: open, the producing phase, the next phase."""
    shared = SharedWorkCache.open(method, root, scope, ONE_RANK)
    plan = method.phases(4)
    try:
        shared.before_phase(plan[0])
        method.value = value  # "trained" during the producing phase
        shared.before_phase(plan[1])
    finally:
        shared.close()
    return shared


def test_the_first_trial_builds_and_publishes_the_next_loads(tmp_path):
    first = Counting()
    shared = SharedWorkCache.open(first, tmp_path, "teacher-key", ONE_RANK)
    assert shared.building and not shared.loaded
    shared.before_phase(Phase("make", 2, ("w",)))
    first.value = 7.0
    assert not shared.folder.exists() and not lock_is_free(tmp_path)  # not published while producing
    shared.before_phase(Phase("use", 4, ("w",)))
    assert json.loads((shared.folder / "value.json").read_text()) == 7.0
    assert lock_is_free(tmp_path) and not shared.building
    shared.close()  # idempotent

    second = Counting()
    again = SharedWorkCache.open(second, tmp_path, "teacher-key", ONE_RANK)
    assert again.loaded and not again.building
    assert second.value == 7.0 and second.loaded_from == shared.folder
    assert [p.steps for p in second.phases(4)] == [0, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([shared.folder.name, shared.folder.name + ".lock"])


@pytest.mark.parametrize("left", [["lock"], ["lock", "student.pt.4242.tmp"]])
def test_a_folder_left_by_a_trial_of_the_former_cache_that_died_is_built_again(tmp_path, left):
    name = SharedWorkCache.open(Counting(), tmp_path, "teacher-key", ONE_RANK)
    name.close()
    (tmp_path / name.folder.name).mkdir()
    for file in left:  # what a trial that died while distilling left: its lock, maybe a half-write
        (tmp_path / name.folder.name / file).write_text("")
    shared = build_and_publish(Counting(), tmp_path, 3.0)
    assert shared.folder == name.folder and json.loads((shared.folder / "value.json").read_text()) == 3.0
    again = Counting()
    assert SharedWorkCache.open(again, tmp_path, "teacher-key", ONE_RANK).loaded and again.value == 3.0


def test_the_folder_is_named_by_the_methods_key_and_the_scope(tmp_path):
    build_and_publish(Counting(key="a"), tmp_path, 1.0)
    build_and_publish(Counting(key="b"), tmp_path, 2.0)
    build_and_publish(Counting(key="a"), tmp_path, 3.0, scope="another-teacher")
    folders = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(folders) == 3 and all(f.name.startswith("counting-") for f in folders)
    assert artifact_name("counting", "teacher-key", {"key": "a"}) != artifact_name("counting", "teacher-key", {"key": "b"})
    with pytest.raises(ValueError, match="scope"):
        artifact_name("counting", "teacher-key", {"scope": "mine"})


def test_minilm_keeps_the_folder_name_of_its_former_own_cache():
    """The digest of MiniLM's key plus the scope is the `_distillation_key` MiniLM computed
    itself before the pipeline took the cache over (pinned), so existing caches stay valid."""
    from methods.minilm import MiniLM
    from tests.conftest import make_tiny_bert

    ctx = MethodContext(task=TaskInfo("t", 2, False), teacher=make_tiny_bert(num_layers=4, seed=1), load_pretrained=make_tiny_bert,
                        student=StudentDefaults(num_layers=2), learning_rate=1e-4, steps_per_epoch=4, unlabeled_steps_per_epoch=3)
    method = MiniLM({"share_distillation": True, "num_layers": 2, "distill_epochs": 2.0}, ctx)
    assert artifact_name(method.name, "teacher-key", method.shared_work().key) == "minilm-bf4082049748b815"


def test_without_a_root_or_shared_work_nothing_is_shared(tmp_path):
    method = Counting()
    shared = SharedWorkCache.open(method, None, "teacher-key", ONE_RANK)
    for phase in method.phases(4):
        shared.before_phase(phase)
    shared.close()
    assert not shared.loaded and not shared.building and method.loaded_from is None

    plain = Counting()
    plain.shared_work = lambda: None
    shared = SharedWorkCache.open(plain, tmp_path, "teacher-key", ONE_RANK)
    assert not shared.building and not list(tmp_path.iterdir())


def test_a_trial_that_fails_while_building_publishes_nothing_and_frees_the_lock(tmp_path):
    method = Counting()
    shared = SharedWorkCache.open(method, tmp_path, "teacher-key", ONE_RANK)
    shared.before_phase(Phase("make", 2, ("w",)))
    shared.close()  # the loop's finally, after an exception in the producing phase
    assert not shared.folder.exists() and lock_is_free(tmp_path)
    retry = SharedWorkCache.open(Counting(), tmp_path, "teacher-key", ONE_RANK)
    assert retry.building  # the next trial builds it
    retry.close()


def test_a_failed_save_leaves_no_partial_artifact(tmp_path):
    method = Counting()

    def broken(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x")
        raise OSError("disk full")

    method.save_shared = broken
    shared = SharedWorkCache.open(method, tmp_path, "teacher-key", ONE_RANK)
    shared.before_phase(Phase("make", 2, ("w",)))
    with pytest.raises(OSError, match="disk full"):
        shared.before_phase(Phase("use", 4, ("w",)))
    shared.close()
    assert [p.name for p in tmp_path.iterdir()] == [shared.folder.name + ".lock"]


def test_a_trial_racing_the_builder_waits_for_it_and_loads(tmp_path):
    """Two trials with the same key at once: the one that finds the lock taken blocks in open()
    until the builder publishes, then loads; the work is done once."""
    builder, waiter = Counting(), Counting()
    claimed, published_at, opened_at = threading.Event(), [], []

    def build() -> None:
        shared = SharedWorkCache.open(builder, tmp_path, "teacher-key", ONE_RANK)
        claimed.set()
        shared.before_phase(Phase("make", 2, ("w",)))
        time.sleep(0.5)  # building, while the other trial waits
        builder.value = 42.0
        published_at.append(time.monotonic())
        shared.before_phase(Phase("use", 4, ("w",)))
        shared.close()

    def wait() -> None:
        claimed.wait()
        shared = SharedWorkCache.open(waiter, tmp_path, "teacher-key", ONE_RANK)
        opened_at.append((time.monotonic(), shared.loaded, shared.building))
        shared.close()

    threads = [threading.Thread(target=build), threading.Thread(target=wait)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    (when, loaded, building), = opened_at
    assert loaded and not building and waiter.value == 42.0
    assert when >= published_at[0]


# --------------------------------------------------------------------------------------------
# through the loop: MiniLM distils once, later trials fine-tune from it
# --------------------------------------------------------------------------------------------


def _distil_and_finetune(root: Path, seed: int, **params):
    from methods.minilm import MiniLM, MiniLMParams
    from pipeline.config import TrainConfig
    from tests.conftest import make_tiny_bert
    from tests.contract.test_method_contract import _Task, tiny_dataset

    teacher = make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(task=TaskInfo("t", 2, False), teacher=teacher, load_pretrained=make_tiny_bert,
                        student=StudentDefaults(num_layers=2), learning_rate=1e-3)
    method = MiniLM(MiniLMParams(**{"share_distillation": True, "distill_epochs": 1.0, **params}), ctx)
    train = TrainConfig(max_steps=2, batch_size=8, learning_rate=1e-3, eval_every=2, warmup_ratio=0.0, progress_bar=False)
    result = loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train,
                      seed=seed, unlabeled_set=tiny_dataset(24, seed=2), shared_root=root, shared_scope="teacher-key")
    return method, result


def test_shared_distillation_runs_once_and_later_trials_fine_tune_from_it(tmp_path, monkeypatch):
    from methods.minilm import STUDENT_FILE, MiniLM

    first, result = _distil_and_finetune(tmp_path, seed=0)
    assert first.distilled is None and result.steps == 3 + 2  # 24 texts / batch 8 = 3 distill steps, then 2 fine-tuning
    (folder,) = [p for p in tmp_path.glob("minilm-*") if p.is_dir()]
    distilled = torch.load(folder / STUDENT_FILE, weights_only=True)

    # another seed and another fine-tuning learning rate (the distillation rate, 1e-3, given
    # explicitly now, is the same) reuse it: no distillation steps, and the student it fine-tunes
    # starts from exactly the distilled weights
    seen = {}
    original = MiniLM.start_phase

    def spy(self, phase):
        if phase.name == "finetune":
            seen["start"] = {k: v.clone() for k, v in self.model["student"].state_dict().items()}
        original(self, phase)

    monkeypatch.setattr(MiniLM, "start_phase", spy)
    second, result = _distil_and_finetune(tmp_path, seed=1, learning_rate=3e-4, distill_learning_rate=1e-3)
    assert second.distilled == folder / STUDENT_FILE and result.steps == 2
    assert [(p.name, p.steps) for p in second.phases(2)] == [("distill", 0), ("finetune", 2)]
    assert all(torch.equal(seen["start"][k], v) for k, v in distilled.items())

    # a different distillation setting is a different distilled student
    third, result = _distil_and_finetune(tmp_path, seed=0, distill_epochs=2.0)
    assert third.distilled is None and result.steps == 6 + 2
    assert len(list(tmp_path.glob(f"minilm-*/{STUDENT_FILE}"))) == 2


# --------------------------------------------------------------------------------------------
# under DDP: rank 0 decides, every rank follows
# --------------------------------------------------------------------------------------------


def _rank(rank: int, world: int, port: int, root: str, out: str, timeout_s: float | None = None) -> None:
    import datetime

    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    timeout = {"timeout": datetime.timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group("gloo", rank=rank, world_size=world, **timeout)
    try:
        ranks = Distributed(strategy="ddp", world_size=world, rank=rank)
        seen = []
        for key, value in (("a", 1.0), ("b", 2.0), ("b", 3.0)):  # three trials, one after the other
            method = Counting(key=key)
            shared = SharedWorkCache.open(method, Path(root), "teacher-key", ranks)
            seen.append({"building": shared.building, "loaded": shared.loaded, "steps": [p.steps for p in method.phases(4)]})
            for phase in method.phases(4):
                shared.before_phase(phase)
                if phase.name == "make" and phase.steps:
                    method.value = value
            shared.close()
            seen[-1]["value"] = method.value
            dist.barrier()
        Path(f"{out}.{rank}").write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("timeout_s, building_s", [(None, 1.0), (2.0, 5.0)], ids=["default-timeout", "build-outlasts-timeout"])
def test_under_ddp_rank_zero_decides_and_every_rank_plans_alike(tmp_path, timeout_s, building_s):
    """Key "a" is being built by another trial (this test holds its lock, then publishes): rank 0
    waits for it, and rank 1, which alone would find nothing yet and plan to build, follows rank
    0's decision. Key "b": rank 0 builds and alone holds the lock; the next trial loads on both.

    The other trial's build may take longer than the process group's timeout (a MiniLM
    distillation can outlast NCCL's 1,800 s, after which Ray's async error handling kills the
    trial): while rank 0 waits on the lock, no rank may wait in a collective. The second case's
    group times out after 2 s and the build takes 5 (rank 1 in a broadcast failed it)."""
    import socket

    import torch.multiprocessing as mp

    root = tmp_path / "cache"
    root.mkdir()
    folder = root / artifact_name("counting", "teacher-key", {"key": "a"})
    lock = os.open(folder.with_name(folder.name + ".lock"), os.O_CREAT | os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "seen")
    # fork: the children start with what this process has imported (spawn would import it all again)
    ranks = mp.start_processes(_rank, args=(2, port, str(root), out, timeout_s), nprocs=2, join=False, start_method="fork")
    time.sleep(building_s)  # the other trial is still building
    scratch = root / ".scratch"
    scratch.mkdir()
    (scratch / "value.json").write_text("9.0")
    os.rename(scratch, folder)
    fcntl.flock(lock, fcntl.LOCK_UN)
    os.close(lock)
    while not ranks.join(timeout=60):
        pass
    rank0, rank1 = (json.loads(Path(f"{out}.{r}").read_text()) for r in range(2))
    assert rank0[0] == rank1[0] == {"building": False, "loaded": True, "steps": [0, 4], "value": 9.0}
    assert rank0[1] == {"building": True, "loaded": False, "steps": [2, 4], "value": 2.0}
    assert rank1[1] == {"building": False, "loaded": False, "steps": [2, 4], "value": 2.0}
    assert rank0[2] == rank1[2] == {"building": False, "loaded": True, "steps": [0, 4], "value": 2.0}
