"""Hub revisions: a full commit sha is its own resolution, and the cache folder is huggingface_hub's."""

from __future__ import annotations

from huggingface_hub import constants

from pipeline.prepare.hub import cache_folder, is_commit, resolve_revision

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_only_a_full_lowercase_sha_is_a_commit():
    assert is_commit(SHA)
    assert not is_commit(SHA[:12]) and not is_commit(SHA.upper()) and not is_commit("main") and not is_commit(None)


def test_a_commit_resolves_to_itself_without_asking_the_hub(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing answers there
    assert resolve_revision("org/model", SHA, repo_type="model", field="teacher.revision") == SHA


def test_the_cache_folder_is_named_as_huggingface_hub_names_it(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert cache_folder("org/name", "dataset") == tmp_path / "datasets--org--name"
    assert cache_folder("org/name", "model") == tmp_path / "models--org--name"
