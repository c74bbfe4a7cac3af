"""Fingerprints of a model's weights and tokenizer, the identity a rank cache is keyed on.

Weights: the hub commit for hub ids (the revision resolved now, through the hub or, when it
cannot be reached, the local hub cache layout; a revision that cannot be resolved is a one-line
error, never a key that could go stale), else sha256 over the local weight files and config
(path-independent). Tokenizer: sha256 over everything that decides token ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from rbplab.catalog.models import ModelLoadError, ResolvedModel

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_COMMIT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/")


FINAL_STEP_BRANCHES = ("step143000",)  # Pythia's final checkpoint: some repos only have it as `main`
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def _snapshot_commit(path: str | None) -> str | None:
    match = _COMMIT_RE.search(Path(path).as_posix()) if isinstance(path, str) else None
    return match.group(1) if match else None


def _cached_commit(repo: str, revision: str, filename: str) -> str | None:
    """The commit the local hub cache records for `revision` when it also holds `filename` at that
    commit; no network."""
    from huggingface_hub import try_to_load_from_cache

    return _snapshot_commit(try_to_load_from_cache(repo, filename, revision=revision))


def _listing(branches: list[str]) -> str:
    return ", ".join(branches[:12]) + (f", ... ({len(branches)} branches)" if len(branches) > 12 else "")


def resolve_commit(model: ResolvedModel) -> str:
    """The commit a hub model's revision (branch, tag or commit; None = main) points at now.

    Asked of the hub when it can be reached (`rbplab.store.hub`), else read from the local hub
    cache. Raises a one-line error when it cannot be resolved: `HubUnreachableError` ("the hub
    cannot be reached (offline?)") when the hub is out of reach and the cache lacks it, at once and
    without retries; ModelLoadError "has no revision" only when the hub says so (listing the repo's
    branches and, for a final-step branch, suggesting `main`), or "no model repository" likewise.
    """
    revision = model.revision
    if revision and _SHA_RE.match(revision):
        return revision
    from rbplab.store import hub

    wanted = revision or "main"
    filename = model.gguf_file or "config.json"
    reason = hub.offline_reason()
    if reason is None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        try:
            commit = hub.remote_commit(model.location, filename, wanted)
            # the hub just answered: downloading the file records refs/<revision>, so the same
            # revision resolves offline later
            hf_hub_download(model.location, filename, revision=wanted)
        except RevisionNotFoundError:
            raise _no_revision(model.location, wanted) from None
        except RepositoryNotFoundError:
            raise ModelLoadError(
                f"the hub has no model repository {model.location!r} (or it is private or gated: log "
                "in with `hf auth login`); check the name, or pass a local model directory"
            ) from None
        except Exception as err:  # noqa: BLE001 - classified: out of reach, or the hub's answer
            if not hub.is_connection_error(err):
                raise ModelLoadError(
                    f"cannot resolve {model.location}@{wanted} to a commit: {type(err).__name__}: "
                    f"{' '.join(str(err).split())}"
                ) from None
            reason = hub.mark_unreachable(err)
        else:
            if commit:
                return commit
            raise ModelLoadError(f"cannot resolve {model.location}@{wanted} to a commit (the hub named none)")
    commit = _cached_commit(model.location, wanted, filename)
    if commit:
        return commit
    cached = hub.cached_branches(model.location)
    known = f" (cached here: {_listing(cached)})" if cached else ""
    raise hub.unreachable(f"{model.location}@{wanted}", reason, f", or pass a commit{known}")


def _no_revision(repo: str, wanted: str) -> ModelLoadError:
    """The hub said `repo` has no branch, tag or commit `wanted`."""
    from rbplab.store import hub

    branches = hub.branches(repo)
    hint = (
        " The final checkpoint is the `main` branch: use revision='main'."
        if wanted in FINAL_STEP_BRANCHES
        else ""
    )
    available = f"available branches: {_listing(branches)}." if branches else "no branches listed."
    return ModelLoadError(f"{repo} has no revision {wanted!r} on the hub; {available}{hint}")


@lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def files_digest(files: list[Path], root: Path) -> str:
    """sha256 over the relative names and contents of `files` (each file's hash memoised by size
    and modification time)."""
    digest = hashlib.sha256()
    for file in sorted(files):
        stat = file.stat()
        file_hash = _file_sha256(str(file), stat.st_size, stat.st_mtime_ns)
        digest.update(f"{file.relative_to(root).as_posix()}\0{file_hash}\n".encode())
    return digest.hexdigest()


def weights_fingerprint(model: ResolvedModel) -> str:
    """Identity of the weights: ``hub:<commit>`` (the branch resolved now; an unresolvable revision is
    a ModelLoadError, never a key that could go stale), or sha256 over the local weight files and config."""
    if not model.local:
        return f"hub:{resolve_commit(model)}"
    root = Path(model.location)
    if model.gguf_file:
        files = [root / model.gguf_file]
    else:
        files = [p for p in root.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)]
        files.append(root / "config.json")
    return "sha256:" + files_digest(files, root)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of everything that decides token ids: the serialised tokenizer and its special tokens."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    special = {k: getattr(tokenizer, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    digest.update(json.dumps({**special, "len": len(tokenizer)}, sort_keys=True).encode())
    return "sha256:" + digest.hexdigest()
