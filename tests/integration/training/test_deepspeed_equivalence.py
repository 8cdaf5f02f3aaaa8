"""DDP ≡ DeepSpeed on the CPU: the same seed trained with DDP and with DeepSpeed ZeRO 0/1/2 on two
gloo processes takes the same optimizer steps at the same learning rates and ends with the same
weights, with and without gradient accumulation, and for a method with two phases.

Why the tolerance (atol 1e-5, rtol 1e-4 on the weights after 4 AdamW steps at lr 1e-3): both
strategies run the same fp32 maths on the same batches; what differs is where the gradients are
averaged (DDP's bucketed all-reduce, ZeRO's reduce-scatter of flattened partitions) and so the
order of the float additions, which moves the last bits of each gradient. Adam divides by the
root of the second moment, which at step 1 turns any gradient into ±lr: a last-bit difference
in a gradient near 0 can become a difference of order lr·(δg/g) in that weight. The largest
difference measured on these runs was 1.2e-6 (MiniLM, ZeRO-1; the assertion's message prints it).

Why the runs share their processes: a spawned process spends ~10 s of CPU importing torch,
transformers, DeepSpeed and the test helpers (`python -c "import tests.contract.test_method_contract"`:
10.4 s wall, 9.4 s user) before it trains its 4 tiny steps, and the tests below need some twenty
trainings of two processes each (~700 s on a loaded 2-core machine, the suite's heaviest file, when
each had its own spawn). So every training the collected tests need (`NEEDS`, a configuration being
a method, strategy, ZeRO stage and accumulation) runs once, on first use, in one spawn of two
processes: one configuration after another in the same process group, the ZeRO-3 ones last (a
ZeRO-3 engine stays referenced after destroy(): docs/stack-facts.md, "ZeRO-3"), each building its
own method and model from the seed, which gives the weights separate spawns give. A configuration
shared by two tests (MiniLM's DDP reference) runs once. One that raises fails only the tests that
use it, with its traceback (test_distributed_loop.run_batch). The bf16 export test's four stages
share one spawn the same way; the killed-and-resumed test keeps its own spawns (it kills its ranks).
A test selected alone runs only the configurations it needs.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.config import TrainConfig
from pipeline.training import engine, loop
from tests.integration.training.test_distributed_loop import CaseFailed, collected_params, free_port, join, outcome, run_batch

WORLD = 2
# ZeRO-3 keeps parameters under 1e5 elements whole once gathered (DeepSpeed's persistence
# threshold): every parameter of these tiny models. At 0, each is partitioned between uses.
PARTITION_EVERYTHING = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}


def _distributed(rank: int, strategy: str, stage: int) -> engine.Distributed:
    preset = PARTITION_EVERYTHING if strategy == "deepspeed" and stage == 3 else None
    return engine.Distributed(strategy=strategy, world_size=WORLD, rank=rank, zero_stage=stage, deepspeed_preset=preset)


def _watch_partitioning(method, seen: set[str]) -> None:
    """Records, at each forward of each of the method's modules, whether one of its parameters
    was empty on entry (this hook runs before ZeRO-3's, which gathers the slices as it runs)."""
    original_build = method.build

    def build():
        model = original_build()
        for module in model.modules():
            module.register_forward_pre_hook(lambda module, args: seen.add(
                "partitioned" if any(p.numel() == 0 for p in module.parameters(recurse=False)) else "whole"))
        return model

    method.build = build


def _join(rank: int, port: int) -> None:
    """This spawned process as rank `rank` of a two-process gloo group, DeepSpeed on its CPU accelerator."""
    join(rank, WORLD, port)


ENGINE_TYPES = ("DeepSpeedEngine", "DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer_Stage3")


def _live_engines() -> list:
    gc.collect()
    return [o for o in gc.get_objects() if type(o).__name__ in ENGINE_TYPES]


def _train(rank: int, method_name: str, strategy: str, zero_stage: int, accumulation: int) -> dict:
    """One configuration's training, on rank `rank` of the batch's process group."""
    from tests.contract.test_method_contract import _Task, make_method, tiny_dataset

    # the engines of the batch's earlier configurations still alive (ZeRO-3's) are not this one's;
    # held here, so that none is freed and its id taken by one of this configuration's
    earlier = _live_engines()
    bounded = method_name.endswith("-bounded")
    method, _ = make_method(method_name.removesuffix("-bounded"))
    if bounded:  # every group kept in [-0.03, 0.03]: the step moves some weights out, the loop clamps them back
        original_groups = method.param_groups
        method.param_groups = lambda phase: [dataclasses.replace(g, bounds=(-0.03, 0.03)) for g in original_groups(phase)]
    seen: set[str] = set()
    _watch_partitioning(method, seen)
    train = TrainConfig(max_steps=4, batch_size=16, grad_accumulation=accumulation, learning_rate=1e-3,
                        warmup_ratio=0.25, eval_every=4, progress_bar=False)
    unlabeled = tiny_dataset(24, seed=2, labels=False) if method.unlabeled() is not None else None
    result = loop.run(
        method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train, seed=0,
        unlabeled_set=unlabeled, dist=_distributed(rank, strategy, zero_stage), log_every=1,
    )
    lrs = [{k: v for k, v in row.items() if k.startswith("lr/")} for row in result.history]
    weights = {k: v.detach().clone() for k, v in method.eval_model().state_dict().items()}
    engines = len({id(o) for o in _live_engines()} - {id(o) for o in earlier})
    del earlier
    return {"steps": result.steps, "lrs": lrs, "weights": weights, "engines_alive": engines,
            "partitioned": "partitioned" in seen}


Config = tuple[str, str, int, int]  # method_name, strategy, zero_stage, accumulation

# The configurations each test trains (by its parameters). The batch runs those of the collected
# tests; a configuration a test asks for that is not listed here still runs, on its own spawn.
NEEDS: dict[str, Callable[..., list[Config]]] = {
    "test_kd_trains_alike_under_ddp_and_every_zero_stage": lambda accumulation: [
        ("kd", "ddp", 0, accumulation), *(("kd", "deepspeed", stage, accumulation) for stage in _kd_stages(accumulation))],
    "test_a_multi_phase_method_trains_alike_and_leaves_no_engine_behind": lambda method_name, stage: [
        (method_name, "ddp", 0, 2), (method_name, "deepspeed", stage, 2)],
    "test_bounds_hold_on_deepspeeds_masters_as_on_ddps_weights": lambda stage: [
        ("kd-bounded", "ddp", 0, 1), ("kd-bounded", "deepspeed", stage, 1)],
    "test_zero_3_hands_each_phase_whole_parameters": lambda: [("minilm", "ddp", 0, 2), ("minilm", "deepspeed", 3, 2)],
    "test_zero_2_leaves_a_module_no_rank_used_alone_like_ddp": lambda: [("theseus", "ddp", 0, 1), ("theseus", "deepspeed", 2, 1)],
}


def _kd_stages(accumulation: int) -> tuple[int, ...]:
    # without accumulation the default stage only: each stage is a training of two processes, and
    # the suite must stay under 12 minutes
    return (0, 1, 2, 3) if accumulation == 2 else (2,)


def _key(config: Config) -> str:
    return "-".join(map(str, config))


@pytest.fixture(scope="module")
def train(request, tmp_path_factory) -> Callable[[str, str, int, int], dict]:
    """A configuration's result (rank 0's, once every rank is checked to hold the same model). The
    first request runs every configuration the collected tests need, once each, in one spawn."""
    needed = [config for name, configs in NEEDS.items() for params in collected_params(request, name)
              for config in configs(**params)]
    # ZeRO-3 last: its engines outlive their phase (docs/stack-facts.md, "ZeRO-3")
    needed = sorted(dict.fromkeys(needed), key=lambda c: c[1] == "deepspeed" and c[2] == 3)
    outcomes: dict[str, list | CaseFailed] = {}

    def trained(method_name: str, strategy: str, zero_stage: int, accumulation: int) -> dict:
        config = (method_name, strategy, zero_stage, accumulation)
        if _key(config) not in outcomes:
            batch = [c for c in needed if _key(c) not in outcomes] if not outcomes else []
            batch += [] if config in batch else [config]
            outcomes.update(run_batch([(_key(c), _train, c) for c in batch], WORLD, tmp_path_factory.mktemp("trainings")))
        ranks = outcome(outcomes, _key(config))
        for name, value in ranks[0]["weights"].items():  # every rank holds the same model
            torch.testing.assert_close(ranks[1]["weights"][name], value, atol=1e-6, rtol=1e-5)
        return ranks[0]

    return trained


def assert_same_training(deepspeed: dict, ddp: dict) -> None:
    assert deepspeed["steps"] == ddp["steps"] >= 4
    assert len(deepspeed["lrs"]) == len(ddp["lrs"]) == ddp["steps"]  # one log row per optimizer step
    for got, want in zip(deepspeed["lrs"], ddp["lrs"]):
        assert got.keys() == want.keys()
        assert [got[k] for k in sorted(got)] == pytest.approx([want[k] for k in sorted(want)], rel=1e-9)
    worst = max(float((deepspeed["weights"][k] - v).abs().max()) for k, v in ddp["weights"].items())
    for name, value in ddp["weights"].items():
        torch.testing.assert_close(deepspeed["weights"][name], value, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m} (largest difference over all weights {worst:.3g})")


@pytest.mark.parametrize("accumulation", [1, 2])
def test_kd_trains_alike_under_ddp_and_every_zero_stage(train, accumulation):
    """ZeRO-3 too: its parameters were partitioned while training (empty on entry to a forward)
    and the weights that come out of the run are whole (the export's and the next phase's)."""
    ddp = train("kd", "ddp", 0, accumulation)
    assert not ddp["partitioned"]
    for stage in _kd_stages(accumulation):
        deepspeed = train("kd", "deepspeed", stage, accumulation)
        assert deepspeed["partitioned"] == (stage == 3)
        assert_same_training(deepspeed, ddp)


@pytest.mark.parametrize(("method_name", "stage"), [("theseus", 1), ("minilm", 1), ("cofi", 2)])
def test_a_multi_phase_method_trains_alike_and_leaves_no_engine_behind(train, method_name, stage):
    """Each phase has its own DeepSpeed engine over the same parameters: Theseus' replacing then
    successor fine-tuning, MiniLM's distillation on unlabeled text then fine-tuning, CoFi's
    distillation warm-up, pruning with Lagrange multipliers ascending, then the pruned model's
    fine-tuning. A phase's engine hangs gradient hooks on the parameters that keep it and its
    optimizer's partitions alive: it must be destroyed when its phase ends. (CoFi did not start
    under DeepSpeed before: its 0-dim λ broke DeepSpeed's start-up broadcast.)"""
    ddp = train(method_name, "ddp", 0, 2)
    deepspeed = train(method_name, "deepspeed", stage, 2)
    assert_same_training(deepspeed, ddp)
    assert deepspeed["engines_alive"] == 0


@pytest.mark.parametrize("stage", [2, 3])
def test_bounds_hold_on_deepspeeds_masters_as_on_ddps_weights(train, stage):
    """A group's bounds (CoFi's log α range) clamp the optimizer's fp32 masters too. Clamping
    only the module's parameters, as a method can, is undone at DeepSpeed's next step: it copies
    its unclamped masters back into them, so a weight held at the bound by DDP drifts from it."""
    ddp = train("kd-bounded", "ddp", 0, 1)
    assert max(float(v.abs().max()) for k, v in ddp["weights"].items() if "layer" in k) <= 0.03 + 1e-7
    assert_same_training(train("kd-bounded", "deepspeed", stage, 1), ddp)


def test_zero_3_hands_each_phase_whole_parameters(train):
    """MiniLM's three phases under ZeRO-3, every parameter partitioned between uses: a phase
    must hand the next one whole, plain parameters (its ZeRO-3 engine would otherwise take the
    partitioned ones as already its own, empty) and the export whole weights. Known and not
    asserted here: each phase's engine and optimizer stay referenced after destroy() under
    ZeRO-3 (docs/stack-facts.md, "ZeRO-3")."""
    ddp = train("minilm", "ddp", 0, 2)
    deepspeed = train("minilm", "deepspeed", 3, 2)
    assert deepspeed["partitioned"]
    assert_same_training(deepspeed, ddp)


@pytest.mark.xfail(strict=True, reason=(
    "ZeRO-2 steps every parameter of its flat partitions: a Theseus successor that no rank used in "
    "a step (its gradient None under DDP, which AdamW skips) gets a zero gradient, so AdamW's "
    "momentum and weight decay still move it. ZeRO 0 and 1 skip it as DDP does. Measured: 3e-3 "
    "after 4 steps at lr 1e-3 on layer 0's successor; equal to 1e-7 when every module is used."),
    raises=AssertionError)  # assert_same_training's: a batched training that raised is a CaseFailed
def test_zero_2_leaves_a_module_no_rank_used_alone_like_ddp(train):
    ddp = train("theseus", "ddp", 0, 1)
    assert_same_training(train("theseus", "deepspeed", 2, 1), ddp)


def _train_bf16_and_export(rank: int, stage: int, out: str) -> dict | None:
    """One stage's bf16 training, on rank `rank` of the batch's process group; rank 0 exports the
    student into `out`/student and returns what the test checks."""
    from pipeline.training.export import reference_logits
    from tests.conftest import make_batch
    from tests.contract.test_method_contract import _Task, make_method, tiny_dataset

    method, _ = make_method("kd")
    seen: set[torch.dtype] = set()
    train = TrainConfig(max_steps=4, batch_size=16, learning_rate=1e-3, eval_every=2, bf16="on", progress_bar=False)

    def watch(module, args):
        seen.add(next(module.parameters()).dtype)

    original_build = method.build

    def build():
        model = original_build()
        model.register_forward_pre_hook(watch)
        return model

    method.build = build
    loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train, seed=0,
             dist=_distributed(rank, "deepspeed", stage))
    trained_in = sorted(str(d) for d in seen)  # the forwards of training and evaluation
    if rank != 0:
        return None
    batch = make_batch(batch_size=4, seq_len=8, seed=5)
    batch.pop("labels", None)
    expected = reference_logits(method.eval_model(), batch)
    student = method.export()
    student.save_pretrained(f"{out}/student")
    return {"trained_in": trained_in, "batch": batch, "expected": expected,
            "weights": {k: v.detach().clone() for k, v in student.state_dict().items()}}


@pytest.fixture(scope="module")
def bf16_export(request, tmp_path_factory) -> Callable[[int], tuple[dict, Path]]:
    """A stage's rank-0 result and the folder its student was exported into. The first request
    trains every collected stage, one after another (ZeRO-3 last), in one spawn."""
    needed = sorted(params["stage"] for params in collected_params(
        request, "test_a_bf16_deepspeed_run_exports_float32_from_its_full_precision_weights"))
    outcomes: dict[str, list | CaseFailed] = {}
    folder = tmp_path_factory.mktemp("bf16")

    def result(stage: int) -> tuple[dict, Path]:
        if f"stage-{stage}" not in outcomes:
            stages = [s for s in needed if f"stage-{s}" not in outcomes] if not outcomes else []
            stages += [] if stage in stages else [stage]
            for s in stages:
                (folder / f"stage-{s}").mkdir(exist_ok=True)
            jobs = [(f"stage-{s}", _train_bf16_and_export, (s, str(folder / f"stage-{s}"))) for s in stages]
            outcomes.update(run_batch(jobs, WORLD, folder))
        return outcome(outcomes, f"stage-{stage}")[0], folder / f"stage-{stage}"

    return result


# ZeRO 0 keeps its masters in an unfused optimizer, ZeRO-1 in its BF16 optimizer (fp32 gradient
# accumulation), ZeRO-2 maps them, ZeRO-3 partitions them
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_bf16_deepspeed_run_exports_float32_from_its_full_precision_weights(bf16_export, stage):
    """DeepSpeed casts the module to bf16 and keeps fp32 masters of what it trains: the export
    must come from those: a bf16 export reloads in bf16, and issue 19 reports its logits missing
    the trained model's fp32 ones by more than the 1e-4 the verification allows."""
    from pipeline.training.export import verify_export

    result, out = bf16_export(stage)
    assert result["trained_in"] == ["torch.bfloat16"]  # the forward passes ran on bf16 weights
    weights = result["weights"]
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.float32}
    # full precision, not bf16 values cast up: some weight differs from its bf16 rounding
    assert max(float((v - v.bfloat16().float()).abs().max()) for v in weights.values() if v.is_floating_point()) > 0
    assert verify_export(out / "student", result["expected"], result["batch"]) <= 1e-4


class _Killed(Exception):
    """Stands for a worker killed mid-phase (a node lost, a preemption)."""


class _SharedFolderReporter:
    """What Ray Train does with a trial's checkpoints, on one machine: every rank saves into one
    folder (DeepSpeed writes one shard per rank, the loop its snapshot from rank 0), and a retried
    trial resumes from it. After `kill_after` reports every rank stops, as killed workers would."""

    def __init__(self, directory: str, kill_after: int | None):
        self.directory, self.kill_after, self.reports = Path(directory), kill_after, 0

    def report(self, metrics, save) -> None:
        if save is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            save(self.directory)
            dist.barrier()  # the folder is complete before anyone moves on (Ray waits for every rank)
        self.reports += 1
        if self.reports == self.kill_after:
            raise _Killed

    def resume_from(self) -> Path | None:
        return self.directory if (self.directory / loop.CHECKPOINT_FILE).is_file() else None


def _train_resumable(rank: int, stage: int, bf16: str, accumulation: int, kill_after: int | None, port: int,
                     checkpoints: str, out: str, method_name: str = "kd", strategy: str = "deepspeed",
                     settings: dict | None = None) -> None:
    _join(rank, port)
    try:
        from tests.contract import test_method_contract as contract
        from tests.contract.test_method_contract import _Task, make_method, tiny_dataset

        if settings is not None:  # this spawned process's own copy of the contract's settings
            contract.SETTINGS = {**contract.SETTINGS, method_name: settings}
        method, _ = make_method(method_name)
        train = TrainConfig(max_steps=4, batch_size=16, grad_accumulation=accumulation, learning_rate=1e-3,
                            warmup_ratio=0.25, eval_every=2, bf16=bf16, progress_bar=False)
        try:
            result = loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(),
                              train=train, seed=0, dist=_distributed(rank, strategy, stage), log_every=1,
                              reporter=_SharedFolderReporter(checkpoints, kill_after))
        except _Killed:
            result = None
        if rank == 0 and result is not None:
            lrs = [{k: v for k, v in row.items() if k.startswith("lr/")} for row in result.history]
            weights = {k: v.detach().clone() for k, v in method.eval_model().state_dict().items()}
            torch.save({"steps": result.steps, "lrs": lrs, "weights": weights, "best": result.best_metrics}, out)
        dist.barrier()  # neither rank tears the group down while the other still uses it
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "bf16", "accumulation"), [(3, "on", 2)])  # one cell: the hardest (time)
def test_a_deepspeed_trial_killed_mid_phase_resumes_to_the_uninterrupted_result(tmp_path, stage, bf16, accumulation):
    """Killed after its step-2 checkpoint (of 4) and retried, a trial continues mid-phase from
    DeepSpeed's shards (the optimizer's fp32 masters and moments, partitioned per rank) and the
    loop's snapshot (data order, RNG, best state), and ends where an uninterrupted run ends:
    the same steps, learning rates and weights. Under bf16 the snapshot's weights are the fp32
    masters, so nothing is rounded to bf16 by the interruption."""
    def run(checkpoints: str, kill_after: int | None, out: str) -> None:
        mp.spawn(_train_resumable, args=(stage, bf16, accumulation, kill_after, free_port(), checkpoints, out),
                 nprocs=WORLD, join=True)

    run(str(tmp_path / "straight"), None, str(tmp_path / "straight.pt"))
    run(str(tmp_path / "killed"), 1, str(tmp_path / "never.pt"))
    assert not (tmp_path / "never.pt").exists()
    snapshot = torch.load(tmp_path / "killed" / loop.CHECKPOINT_FILE, weights_only=True)
    assert (snapshot["phase_index"], snapshot["phase_step"]) == (0, 2)  # mid-phase
    run(str(tmp_path / "killed"), None, str(tmp_path / "resumed.pt"))
    straight, resumed = (torch.load(tmp_path / f"{name}.pt", weights_only=True) for name in ("straight", "resumed"))
    assert resumed["steps"] == straight["steps"] == 4
    assert resumed["lrs"] == straight["lrs"]
    assert resumed["best"] == straight["best"]
    for name, value in straight["weights"].items():
        torch.testing.assert_close(resumed["weights"][name], value, atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    # and the last step's state (the exported weights are the best evaluation's, which may predate the kill)
    last_straight, last_resumed = (_tensors(torch.load(tmp_path / name / loop.CHECKPOINT_FILE, weights_only=True)["method"])
                                   for name in ("straight", "killed"))
    assert last_straight.keys() == last_resumed.keys() and last_straight
    for name, value in last_straight.items():
        torch.testing.assert_close(last_resumed[name], value, atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"last {name}: {m}")


@pytest.mark.slow
def test_a_ddp_trial_whose_ranks_draw_differently_resumes_to_the_uninterrupted_result(tmp_path):
    """Each rank seeds its own RNG (seed × 1000 + rank), so Theseus draws which modules run per
    rank. Killed after its step-2 checkpoint, mid-way through its replacing phase (4 steps), and
    retried, every rank must continue its own draws, not rank 0's (issue #35, item 2): the
    weights end where an uninterrupted run's end."""
    theseus = {"num_layers": 2, "schedule": "constant", "base_rate": 0.5, "replacing_fraction": 1.0}

    def run(checkpoints: str, kill_after: int | None, out: str) -> None:
        mp.spawn(_train_resumable, args=(0, "off", 1, kill_after, free_port(), checkpoints, out, "theseus", "ddp", theseus),
                 nprocs=WORLD, join=True)

    run(str(tmp_path / "straight"), None, str(tmp_path / "straight.pt"))
    run(str(tmp_path / "killed"), 1, str(tmp_path / "never.pt"))
    snapshot = torch.load(tmp_path / "killed" / loop.CHECKPOINT_FILE, weights_only=True)
    assert (snapshot["phase_index"], snapshot["phase_step"]) == (0, 2)  # mid-phase: the draws go on after it
    run(str(tmp_path / "killed"), None, str(tmp_path / "resumed.pt"))
    # the method's state at the last step, from each run's last snapshot (the exported weights
    # are the best evaluation's, which may come before the interruption and hide what followed)
    straight, resumed = (torch.load(tmp_path / name / loop.CHECKPOINT_FILE, weights_only=True) for name in ("straight", "killed"))
    assert resumed["step"] == straight["step"] == 4
    expected, got = _tensors(straight["method"]), _tensors(resumed["method"])
    assert expected.keys() == got.keys() and expected
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


def _tensors(state, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict, by its dotted path."""
    if torch.is_tensor(state):
        return {prefix: state}
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in _tensors(value, f"{prefix}.{key}" if prefix else str(key)).items()}
    return {}
