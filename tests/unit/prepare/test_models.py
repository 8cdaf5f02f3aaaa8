"""Model references: `random`, `pkg:<module>/<folder>`, a local folder, or a hub name."""

from __future__ import annotations

import re

import pytest

from pipeline.errors import SpecError
from pipeline.prepare.models import is_hub_model, model_revision, resolve_model_ref


def test_a_folder_resolves_to_its_path_and_a_hub_name_stays_a_name(tmp_path):
    assert resolve_model_ref(str(tmp_path)) == str(tmp_path)
    assert resolve_model_ref("bert-base-uncased") == "bert-base-uncased"
    assert is_hub_model("org/model") and not is_hub_model(str(tmp_path)) and not is_hub_model("random")


def test_a_package_reference_names_the_folder_inside_the_installed_package():
    assert resolve_model_ref("pkg:pipeline/prepare").endswith("pipeline/prepare")
    with pytest.raises(SpecError, match="package 'no_such_package_here' of 'pkg:no_such_package_here/m' is not installed"):
        resolve_model_ref("pkg:no_such_package_here/m")
    with pytest.raises(SpecError, match="which is not a folder"):
        resolve_model_ref("pkg:pipeline/no-such-folder")


def test_a_path_that_is_no_folder_and_a_revision_without_a_hub_are_refused(tmp_path):
    with pytest.raises(SpecError, match="is not a folder"):
        resolve_model_ref(str(tmp_path / "missing"))
    assert model_revision("random", None) is None
    with pytest.raises(SpecError, match="only a hub model has revisions; 'random' has none"):
        model_revision("random", "main")


def _custom_code_teacher(tmp_path, tiny_tokenizer, where: str):
    """A teacher folder whose config.json (or tokenizer_config.json) names code of its own, which
    leaves a mark when it is imported."""
    import json

    from tests.conftest import make_tiny_bert

    folder = tmp_path / "teacher"
    make_tiny_bert().save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    mark = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\nfrom transformers import BertForSequenceClassification as Evil\n"
                                    "from transformers import BertConfig as EvilConfig\nfrom transformers import BertTokenizerFast as EvilTokenizer\n")
    name = "config.json" if where == "model" else "tokenizer_config.json"
    config = json.loads((folder / name).read_text())
    if where == "model":
        config.update(model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForSequenceClassification": "evil.Evil"})
    else:
        config["auto_map"] = {"AutoTokenizer": [None, "evil.EvilTokenizer"]}
    (folder / name).write_text(json.dumps(config))
    return folder, mark


@pytest.mark.parametrize("where", ["model", "tokenizer"])
def test_a_teacher_that_ships_its_own_code_is_refused_before_any_work_and_its_code_never_runs(tmp_path, tiny_tokenizer, where,
                                                                                                monkeypatch):
    """transformers asks "run the custom code? [y/N]" on stdin: `echo y | drydock train` ran it.
    Every load of the user's teacher says trust_remote_code=False, and validate refuses it first."""
    import io

    from methods.base import TaskInfo
    from pipeline.config import spec_from_dict
    from pipeline.config.checks import teacher_problems
    from pipeline.prepare.models import load_pretrained, load_tokenizer

    folder, mark = _custom_code_teacher(tmp_path, tiny_tokenizer, where)
    spec = spec_from_dict({"name": "t", "task": {"name": "synthetic", "source": "synthetic"}, "teacher": {"model": str(folder)}})
    problems = teacher_problems(spec)
    assert len(problems) == 1 and problems[0].startswith("teacher.model: ") and "custom code" in problems[0], problems
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))  # a user who would answer yes
    with pytest.raises(SpecError, match=r"^teacher.model: .*custom code"):
        if where == "model":
            load_pretrained(spec.teacher, TaskInfo("t", 2, False), 100)
        else:
            load_tokenizer(str(folder))
    assert not mark.exists()


def test_a_teacher_folder_with_pickle_weights_only_is_refused_in_one_line(tmp_path):
    """A `pytorch_model.bin` is a pickle, which loading may run code from; transformers 5 refuses
    it with a traceback after the data stage. validate and the loader say so in one line."""
    import torch

    from methods.base import TaskInfo
    from pipeline.config import spec_from_dict
    from pipeline.config.checks import teacher_problems
    from pipeline.prepare.models import load_pretrained
    from tests.conftest import make_tiny_bert

    folder = tmp_path / "teacher"
    model = make_tiny_bert()
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    spec = spec_from_dict({"name": "t", "task": {"name": "synthetic", "source": "synthetic"}, "teacher": {"model": str(folder)}})
    expected = f"teacher.model: {folder} holds its weights as a pickle (pytorch_model.bin) and no safetensors"
    (problem,) = [p for p in teacher_problems(spec) if "pickle" in p]
    assert problem.startswith(expected), problem
    with pytest.raises(SpecError, match=r"^" + re.escape(expected)):
        load_pretrained(spec.teacher, TaskInfo("t", 2, False), 100)
