"""Model references: `random`, `pkg:<module>/<folder>`, a local folder, or a hub name."""

from __future__ import annotations

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
