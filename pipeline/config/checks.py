"""What a spec cannot say by its fields alone: whether the spec's resources can train its methods
(`validate_methods`), how many trials it makes, what the teacher's own config rules out, and
the DeepSpeed preset it names. `load_spec` makes the checks that read no file the spec names;
`drydock validate` (`check_for_sweep`, `load_deepspeed_preset`) and the sweep make the rest.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

from pipeline.config.domains import Choice, Domain, Grid, RandInt
from pipeline.config.schema import DEFAULT_SHAPES, MAX_TRIALS, SweepSpec, TeacherConfig
from pipeline.errors import SpecError


def validate_methods(spec: SweepSpec) -> list[str]:
    """What a method's parameters cannot say alone: whether the spec's resources can train it.
    (Its parameters and domains were checked as the spec was typed: `method_spaces`.)"""
    from methods import get_declaration

    problems: list[str] = []
    resources = spec.resources
    for name in spec.methods:
        if (resources.strategy == "deepspeed" and resources.deepspeed.zero_stage == 3 and resources.workers_per_trial > 1
                and not get_declaration(name).same_modules_on_every_rank):
            problems.append(
                f"methods.{name}: cannot train under resources.deepspeed.zero_stage 3 with {resources.workers_per_trial} "
                f"workers: its ranks run different modules in one step, and ZeRO-3 gathers each module's weights with a "
                f"collective as it runs (the ranks would wait for each other forever); use zero_stage 2 or one worker")
    return problems


def trial_count(spec: SweepSpec) -> dict[str, int]:
    """Trials per method before any runs, at most (`pipeline.search.space` drops duplicate draws):
    the product of its grids' sizes, × `search.num_samples` when it has random domains, × seeds."""
    counts = {}
    for name, space in spec.methods.items():
        domains = list(space.domains().values())
        configurations = math.prod(len(d.grid) for d in domains if isinstance(d, Grid))
        if any(not isinstance(d, Grid) for d in domains):
            configurations *= spec.search.num_samples
        counts[name] = configurations * len(spec.seeds)
    return counts


def distinct_configurations(spec: SweepSpec) -> float:
    """How many configurations the joint space holds: a number when every domain is a finite
    list or integer range, infinity when a method has a float range (`search_problems` refuses a
    budget the space cannot fill: the study would suggest repeats for ever)."""
    total = 0.0
    for space in spec.methods.values():
        count = 1.0
        for domain in space.domains().values():
            if isinstance(domain, Grid | Choice):
                count *= len({json.dumps(v, sort_keys=True, default=str) for v in domain.argument})
            elif isinstance(domain, RandInt):
                count *= int(domain.high) - int(domain.low)
            else:
                count = math.inf
        total += count
    return total


def search_problems(spec: SweepSpec) -> list[str]:
    """What `search.algorithm` and its budget cannot serve, given the methods: a grid capped below
    its own size (the cap would drop configurations the grid promises), a budget larger than a
    finite joint space holds (the study would suggest repeats for ever), or more trials than a
    sweep may hold."""
    search = spec.search
    budget = search.num_configurations
    if budget is None or not spec.methods:
        return []
    if not search.searching:
        configurations = sum(trial_count(spec).values()) // len(spec.seeds)
        if budget < configurations:
            return [f"search.num_configurations: {budget} is smaller than the grid's {configurations} configurations; "
                    f"a grid runs all of them: drop the field, shrink the grid, or search with algorithm random, tpe, motpe or nsga2"]
        return []
    held = distinct_configurations(spec)
    if budget > held:
        return [f"search.num_configurations: {budget} configurations asked, but the methods' domains hold only {held:g} "
                f"distinct ones; ask for at most {held:g}, or give a parameter a wider domain"]
    if budget * len(spec.seeds) > MAX_TRIALS:
        return [f"search.num_configurations: {budget:,} configurations × {len(spec.seeds)} seed(s) is more than the "
                f"{MAX_TRIALS:,} trials one sweep may hold"]
    return []


def trial_count_problems(spec: SweepSpec) -> list[str]:
    """A sweep of more than MAX_TRIALS trials is refused before any work: each trial is a training
    run, a results row and an MLflow run, and the trial list itself is built in memory."""
    if spec.search.searching:
        return search_problems(spec)
    counts = trial_count(spec)
    total = sum(counts.values())
    if total <= MAX_TRIALS:
        return search_problems(spec)
    sampled = spec.search.num_samples > 1 and any(
        not isinstance(d, Grid) for space in spec.methods.values() for d in space.domains().values())
    where = "search.num_samples" if sampled else "methods"
    per_method = ", ".join(f"{name}: {count:,}" for name, count in counts.items())
    return [f"{where}: the sweep would run {total:,} trials ({per_method}; with {len(spec.seeds)} seed(s)), more than the "
            f"{MAX_TRIALS:,} one sweep may hold; use fewer grid values, search.num_samples or seeds"]


# ----------------------------------------------------------------------------------------------
# the teacher's own limits
# ----------------------------------------------------------------------------------------------

# model types whose position table starts after the padding index (pad_token_id + 1 slots unused)
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def package_folder(module: str) -> Path | None:
    """Where the installed package `module` (dotted or not) lives, found without importing it or
    its parents: `importlib.util.find_spec("a.b")` imports `a`, so validating `pkg:this.x/model`
    ran the module `this`. The top-level name is looked up by every finder (an editable install's
    too), which locates without executing; its subpackages in the folders found."""
    parts = module.split(".")
    if not module or not all(part.isidentifier() for part in parts):
        return None
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return None
    for depth in range(1, len(parts) + 1):
        if spec is None or not spec.submodule_search_locations:
            return None
        if depth == len(parts):
            return Path(list(spec.submodule_search_locations)[0])
        spec = PathFinder.find_spec(".".join(parts[: depth + 1]), list(spec.submodule_search_locations))
    return None


def reference_problems(spec: SweepSpec) -> list[str]:
    """Names in the spec that no work can use, found without importing or connecting: a `pkg:`
    teacher whose package is not installed, a storage URI no filesystem serves."""
    problems = []
    ref = spec.teacher.model
    if ref.startswith("pkg:") and not spec.teacher.finetuned:
        module, _, folder = ref[4:].partition("/")
        found = package_folder(module)
        if found is None:
            problems.append(f"teacher.model: package {module!r} of {ref!r} is not installed (pip install it)")
        elif not (found / folder).is_dir():
            problems.append(f"teacher.model: {ref!r} names {found / folder}, which is not a folder")
    path = spec.resources.storage_path
    if path and "://" in path:
        scheme, _, rest = path.partition("://")
        if scheme not in RAY_STORAGE_SCHEMES:
            problems.append(f"resources.storage_path: cannot open {path}: Ray's storage takes a folder or a URI of "
                            f"{', '.join(s + '://' for s in sorted(RAY_STORAGE_SCHEMES))}, not {scheme}://")
        elif scheme in OBJECT_STORE_SCHEMES and not rest.split("/")[0]:
            problems.append(f"resources.storage_path: {path} names no bucket; give {scheme}://<bucket>/<prefix>")
    return problems


# The schemes pyarrow's `FileSystem.from_uri` opens, which Ray Train's storage uses (checked
# offline: opening an S3 URI may ask the bucket's region over the network).
RAY_STORAGE_SCHEMES = frozenset({"file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})
OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "abfs", "abfss", "az"})  # a URI of these names a bucket first


def teacher_config(teacher: TeacherConfig) -> tuple[dict[str, Any], str] | None:
    """The teacher's shape (its config.json, or `teacher.architecture` for `random`) and where it
    was read, when that needs no network: a fine-tuned teacher folder, a `pkg:` folder, a local
    folder, or a hub model already in the local hub cache. None otherwise: nothing is downloaded.
    Read as JSON, without transformers: only the sizes the spec's checks compare are needed."""
    if teacher.model == "random" and teacher.architecture is not None and not teacher.finetuned:
        a = teacher.architecture
        return ({"num_hidden_layers": a.num_layers, "num_attention_heads": a.num_heads, "hidden_size": a.hidden_size,
                 "max_position_embeddings": a.max_position_embeddings, "model_type": "bert"}, "teacher.architecture")
    candidates = [Path(os.path.expanduser(teacher.finetuned)) / "config.json"] if teacher.finetuned else []
    ref = teacher.model
    if ref.startswith("pkg:"):
        module, _, folder = ref[4:].partition("/")
        found = package_folder(module)
        if found is not None:
            candidates.append(found / folder / "config.json")
    elif ref != "random" and Path(os.path.expanduser(ref)).is_dir():
        candidates.append(Path(os.path.expanduser(ref)) / "config.json")
    elif ref != "random":
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(ref, "config.json", revision=teacher.revision)
        except Exception:  # noqa: BLE001 - a name the hub refuses is reported when the sweep loads it
            cached = None
        if isinstance(cached, str):
            candidates.append(Path(cached))
    for path in candidates:
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return config, str(path)
    return None


def custom_code_problems(config: dict[str, Any], source: Path) -> list[str]:
    """A teacher whose config.json or tokenizer_config.json names code of its own (`auto_map`):
    drydock loads the user's teacher with `trust_remote_code=False` (`pipeline.prepare.models`),
    so it would fail at load; said here, before any work, in one line."""
    found = [(source, config.get("auto_map"))]
    tokenizer_file = source.with_name("tokenizer_config.json")
    if source.name == "config.json" and tokenizer_file.is_file():
        try:
            found.append((tokenizer_file, json.loads(tokenizer_file.read_text(encoding="utf-8")).get("auto_map")))
        except (OSError, ValueError, AttributeError):
            pass  # an unreadable tokenizer config is for its loader to report
    return [f"teacher.model: {path} names custom code ({', '.join(sorted(auto_map)) if isinstance(auto_map, dict) else 'auto_map'}), "
            "which drydock never runs; use a model whose architecture transformers ships (BERT, RoBERTa, ...)"
            for path, auto_map in found if auto_map]


PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")


def pickle_only(folder: Path, field: str) -> str | None:
    """The problem with a model folder that holds its weights as a pickle and no safetensors
    (None when it has safetensors, or no weights drydock can name)."""
    if not folder.is_dir() or any(folder.glob("*.safetensors")) or any(folder.glob("*.safetensors.index.json")):
        return None
    found = [name for name in PICKLE_WEIGHTS if (folder / name).is_file()]
    if not found:
        return None
    return (f"{field}: {folder} holds its weights as a pickle ({found[0]}) and no safetensors; drydock loads safetensors only "
            "(loading a pickle can run code): load it once with transformers and save_pretrained it, which writes model.safetensors")


def teacher_problems(spec: SweepSpec) -> list[str]:
    """What the teacher's own config rules out (`drydock validate` checks it): sequences longer
    than its position table, students deeper than it, heads that do not divide a width. Each
    would fail only once the data is tokenized or the teacher fine-tuned. Not part of
    `load_spec`, which reads no file the spec names (`load_deepspeed_preset` says why)."""
    found = teacher_config(spec.teacher)
    if found is None:
        return []
    config, source = found
    problems: list[str] = custom_code_problems(config, Path(source))
    t = spec.teacher
    if t.finetuned or t.model.startswith("pkg:") or Path(os.path.expanduser(t.model)).is_dir():  # not the hub cache's partial copy
        problem = pickle_only(Path(source).parent, "teacher.finetuned" if t.finetuned else "teacher.model")
        problems += [problem] if problem else []
    ints = {k: v for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)}
    positions = ints.get("max_position_embeddings")
    if positions is not None and config.get("model_type") in _OFFSET_POSITIONS:
        positions -= ints.get("pad_token_id", 1) + 1
    latency = spec.selection.latency
    # the front's shape is said once: as the fields that name it, or as the entry of `shapes` it
    # was taken from (a spec that lists shapes and names no front, `LatencyConfig`); the default
    # shapes are not the user's to fix (a teacher with fewer positions than 128 gets a
    # `latency_error` for 1x128 in variants.parquet)
    labels = [shape.label for shape in latency.shapes]
    front = latency.front_shape
    listed = labels not in (list(DEFAULT_SHAPES), [*DEFAULT_SHAPES, front.label])
    front_field = f"selection.latency.shapes.{labels.index(front.label)} ({front})" if listed else "selection.latency.seq_length"
    lengths = [("task.max_seq_length", spec.task.max_seq_length), (front_field, latency.seq_length)]
    lengths += [(f"selection.latency.shapes.{i} ({shape})", shape.seq_length) for i, shape in enumerate(latency.shapes)
                if shape.seq_length != latency.seq_length and shape.label not in DEFAULT_SHAPES]
    for field, length in lengths:
        if positions is not None and length > positions:
            problems.append(f"{field}: {length} exceeds the teacher's {positions} positions ({source}); use at most {positions}")
    depth = ints.get("num_hidden_layers")
    if depth is not None:
        problems += _depth_problems(spec, depth, source)
    hidden, heads, s = ints.get("hidden_size"), ints.get("num_attention_heads"), spec.student
    if hidden and heads and (s.hidden_size or s.num_heads) and (s.hidden_size or hidden) % (s.num_heads or heads):
        field = "student.num_heads" if s.num_heads else "student.hidden_size"
        problems.append(f"{field}: the student's hidden size {s.hidden_size or hidden} is not divisible by its "
                        f"{s.num_heads or heads} heads (an unset one is the teacher's: hidden size {hidden}, {heads} heads; {source})")
    return problems


def _depth_problems(spec: SweepSpec, depth: int, source: str) -> list[str]:
    """A student keeps at most the teacher's `depth` layers, by indices 0..depth-1: the spec's
    `student` section and every method's `num_layers` / `layers` (each value of a domain)."""
    given: list[tuple[str, Any]] = [("student.num_layers", spec.student.num_layers), ("student.layers", spec.student.layers)]
    for name, space in spec.methods.items():
        for pname in ("num_layers", "layers"):
            value = space.given().get(pname)
            for cand in value.candidates() if isinstance(value, Domain) else [value]:
                given.append((f"methods.{name}.{pname}", cand))
    problems: list[str] = []
    for field, value in given:
        if isinstance(value, int) and not isinstance(value, bool) and value > depth:
            problems.append(f"{field}: {value} layers exceed the teacher's {depth} ({source})")
        elif isinstance(value, list) and (outside := [i for i in value if isinstance(i, int) and not 0 <= i < depth]):
            problems.append(f"{field}: index {outside[0]} is not a layer of the {depth}-layer teacher "
                            f"(indices 0-{depth - 1}; {source})")
    return list(dict.fromkeys(problems))


NO_METHODS = "methods: the spec lists no method to run"  # what `drydock sweep` says too


def check_for_sweep(spec: SweepSpec) -> None:
    """What `drydock validate` checks beyond `load_spec`: a method to run (a spec without one
    still serves `drydock train --method` and `drydock eval`, which load it too) and the
    teacher's own limits. Raises a SpecError listing every problem."""
    problems = ([] if spec.methods else [f"{NO_METHODS} (`drydock methods` lists them), e.g. `methods: {{kd: {{}}}}`"])
    problems += reference_problems(spec)
    problems += teacher_problems(spec)
    problems += warm_start_problems(spec)
    if problems:
        raise SpecError(problems)


def warm_start_problems(spec: SweepSpec) -> list[str]:
    """`search.warm_start` must be a previous sweep's folder holding a study (its runs' journals)."""
    folder = spec.search.warm_start
    if folder is None:
        return []
    path = Path(os.path.expanduser(folder))
    if not path.is_dir():
        return [f"search.warm_start: {folder} is not a folder; give a previous sweep's folder, <workdir>/<sweep name>"]
    if not any(path.glob("runs/*/study.journal")):
        return [f"search.warm_start: {folder} holds no study (runs/*/study.journal): only a sweep that searched with "
                "random, tpe, motpe or nsga2 can seed one"]
    return []


# ----------------------------------------------------------------------------------------------
# DeepSpeed presets
# ----------------------------------------------------------------------------------------------


def load_deepspeed_preset(spec: SweepSpec) -> dict[str, Any] | None:
    """The DeepSpeed JSON config the spec names, read and checked; None when it names none.

    `drydock validate` calls it, so it reports a missing or mismatched preset, and so does the
    sweep before any work, which hands the content to the Train workers (they may run in another
    working directory, or on other nodes). `load_spec` reads no file the spec names: a spec is
    loaded by commands that never use the preset (`drydock eval`, `drydock train`). A relative path is relative to the working
    directory. The preset's ZeRO stage must equal `resources.deepspeed.zero_stage`: the loop sets
    the stage from the spec, so a preset saying otherwise would silently run another stage.
    """
    ds = spec.resources.deepspeed
    if spec.resources.strategy != "deepspeed" or not ds.preset:
        return None
    field = "resources.deepspeed.preset"
    path = Path(ds.preset)
    if not path.is_file():
        raise SpecError(f"{field}: {path} is not a file (a DeepSpeed JSON config)")
    try:
        preset = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{field}: {path} cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{field}: {path} is not valid JSON ({e})") from None
    if not isinstance(preset, dict):
        raise SpecError(f"{field}: {path} holds a JSON {type(preset).__name__}, not an object (a DeepSpeed config)")
    zero = preset.get("zero_optimization") or {}
    stage = zero.get("stage") if isinstance(zero, dict) else None
    if stage is not None and stage != ds.zero_stage:
        raise SpecError(f"{field}: {path} sets ZeRO stage {stage}, but resources.deepspeed.zero_stage is {ds.zero_stage}")
    if isinstance(zero, dict) and zero.get("overlap_comm") and ds.zero_stage < 2:
        # drydock steps DeepSpeed with unmanaged accumulation (pipeline/training/engine.py), which
        # DeepSpeed 0.19 allows with overlap_comm only at stage 2 (an assertion in every trial)
        raise SpecError(f"{field}: {path} sets overlap_comm, which drydock's accumulation supports only with "
                        f"ZeRO stage 2 (resources.deepspeed.zero_stage is {ds.zero_stage})")
    return preset

