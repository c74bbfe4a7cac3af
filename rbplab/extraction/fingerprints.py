"""Fingerprints of a model's weights and tokenizer, the identity a rank cache is keyed on.

Weights: the hub commit for hub ids (the revision resolved now, through the hub or, when it
cannot be reached, the local hub cache layout; a revision that cannot be resolved is a one-line
error, never a key that could go stale), else sha256 over the local weight files and config
(path-independent). Tokenizer: sha256 over everything that decides token ids.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from rbplab.catalog.models import ModelLoadError, ResolvedModel
from rbplab.store import hub

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
FINAL_STEP_BRANCHES = ("step143000",)  # Pythia's final checkpoint: some repos only have it as `main`


def resolve_commit(model: ResolvedModel) -> str:
    """The commit a hub model's revision (branch, tag or commit; None = main) points at now.

    Asked of the hub when it can be reached (`rbplab.store.hub`), else read from the local hub
    cache. Raises a one-line error when it cannot be resolved: `HubUnreachableError` ("the hub
    cannot be reached (offline?)") when the hub is out of reach and the cache lacks it, at once and
    without retries; ModelLoadError "has no revision" only when the hub says so (listing the repo's
    branches and, for a final-step branch, suggesting `main`), or "no model repository" likewise.
    """
    repo, wanted = model.location, model.revision or "main"
    try:  # config.json (or the GGUF file) is what loading reads first: it is cached for offline use
        return hub.resolve_commit(repo, wanted, model.gguf_file or "config.json")
    except hub.NoSuchRevisionError as err:
        final = " The final checkpoint is the `main` branch: use revision='main'."
        hint = final if wanted in FINAL_STEP_BRANCHES else ""
        listed = hub.branch_listing(err.branches)
        available = f"available branches: {listed}." if err.branches else "no branches listed."
        raise ModelLoadError(f"{repo} has no revision {wanted!r} on the hub; {available}{hint}") from None
    except hub.NoSuchRepositoryError:
        raise ModelLoadError(
            f"the hub has no model repository {repo!r} (or it is private or gated: log "
            "in with `hf auth login`); check the name, or pass a local model directory"
        ) from None
    except hub.HubAnswerError as err:
        raise ModelLoadError(f"cannot resolve {repo}@{wanted} to a commit: {err.kind}: {err.text}") from None
    except hub.NoCommitError:
        raise ModelLoadError(f"cannot resolve {repo}@{wanted} to a commit (the hub named none)") from None
    except hub.NotCachedError as err:
        known = f" (cached here: {hub.branch_listing(err.cached)})" if err.cached else ""
        raise hub.unreachable(f"{repo}@{wanted}", err.reason, f", or pass a commit{known}") from None


def identify(model: ResolvedModel) -> tuple[str | None, str]:
    """(the commit a hub model's revision points at now, None for a local model; the weights
    fingerprint). Resolved once per description, so config, tokenizer and weights all load at
    that commit and a branch moving meanwhile cannot mix them."""
    if model.local:
        return None, weights_fingerprint(model)
    commit = resolve_commit(model)
    return commit, f"hub:{commit}"


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
