"""Hub revisions: a branch or tag of a Hugging Face repository, resolved to the commit it names now.

A hub name says nothing about what it holds: `main` moves whenever the owner pushes. So a hub
teacher and a hub dataset are fingerprinted, cached, loaded and recorded by the commit their
revision resolves to (`teacher.revision`, `task.hub_revision`; the default branch `main` when
unset): a push to the repository is a change `drydock retrain` sees, and what is trained is what
is fingerprinted.

Resolution asks the hub (`repo_info(...).sha`). Offline (`HF_HUB_OFFLINE=1`), or when the hub
cannot be reached, it reads the local hub cache's `refs/<revision>` file, the record
`huggingface_hub` keeps there of what each branch or tag named at its last download; an online
answer is written there too, so a later offline run resolves to what was last seen online
rather than to an older download. A commit sha needs no resolving.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.errors import DrydockError
from pipeline.workdir import atomic_write

COMMIT = re.compile(r"[0-9a-f]{40}")
DEFAULT_REVISION = "main"


def is_commit(revision: str | None) -> bool:
    """A full commit sha: immutable, so it is its own resolution."""
    return revision is not None and COMMIT.fullmatch(revision) is not None


def cache_folder(repo_id: str, repo_type: str) -> Path:
    """The repository's folder in the local hub cache (`models--org--name`, `datasets--org--name`),
    under the cache huggingface_hub itself uses (`HF_HUB_CACHE`, else `HF_HOME/hub`)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(constants.HF_HUB_CACHE).expanduser() / repo_folder_name(repo_id=repo_id, repo_type=repo_type)


def resolve_revision(repo_id: str, revision: str | None, *, repo_type: str, field: str,
                     error: type[DrydockError] = DrydockError) -> str:
    """The commit sha `revision` (a branch, tag or sha; None: `main`) of `repo_id` names now.

    The hub answers when it can be reached; a repository or revision it says does not exist is
    the user's to fix (`error`, naming `field`). Offline or unreachable, the cache's ref stands in;
    with neither, `error` says so and what to do."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError

    wanted = revision or DEFAULT_REVISION
    if is_commit(wanted):
        return wanted
    unreachable: Exception | None = None
    if not constants.HF_HUB_OFFLINE:
        try:
            sha = HfApi().repo_info(repo_id, repo_type=repo_type, revision=wanted).sha
        except RevisionNotFoundError:
            raise error(f"{field}: {repo_type} {repo_id!r} has no revision {wanted!r} on the Hugging Face hub") from None
        except RepositoryNotFoundError:
            raise error(f"{field}: no {repo_type} {repo_id!r} on the Hugging Face hub (or it is private or gated: log in)") from None
        except Exception as e:  # no network, a timeout, the hub down: the cache may still answer
            unreachable = e
        else:
            if sha:
                _remember(repo_id, repo_type, wanted, sha)
                return sha
    ref = cache_folder(repo_id, repo_type) / "refs" / wanted
    if ref.is_file() and is_commit(ref.read_text().strip()):
        return ref.read_text().strip()
    why = "HF_HUB_OFFLINE is set" if unreachable is None else f"the hub cannot be reached ({type(unreachable).__name__})"
    raise error(
        f"{field}: cannot resolve revision {wanted!r} of {repo_type} {repo_id!r}: {why} and the local hub cache "
        f"has no {ref}; run once with the hub reachable, or give a commit sha that is cached"
    )


def _remember(repo_id: str, repo_type: str, revision: str, sha: str) -> None:
    """Write `refs/<revision>` as huggingface_hub would: loading by sha (what drydock does, to
    load what it fingerprinted) never updates the ref, so without this an offline run would keep
    resolving to the commit of an older download. Best effort: a read-only cache only loses that."""
    ref = cache_folder(repo_id, repo_type) / "refs" / revision
    try:
        if ref.is_file() and ref.read_text().strip() == sha:
            return
        ref.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(ref, sha)
    except OSError:
        pass
