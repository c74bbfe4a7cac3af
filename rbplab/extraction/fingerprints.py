"""Fingerprints of a model's weights and tokenizer, the identity a rank cache is keyed on.

Weights: the hub commit for hub ids (the revision resolved now, through the hub or the local hub
cache layout; a revision that cannot be resolved is an error listing the branches, never a key that
could go stale), else sha256 over the local weight files and config (path-independent). Tokenizer:
sha256 over everything that
decides token ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from rbplab.extraction.sources import ModelLoadError, Source

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_COMMIT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/")


FINAL_STEP_BRANCHES = ("step143000",)  # Pythia's final checkpoint: some repos only have it as `main`
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def _hub_commit(repo: str, revision: str | None, filename: str = "config.json") -> str | None:
    """Commit hash of a hub repo at `revision`, read from the local hub cache layout (the hub asked
    first when online, so a moved branch is seen)."""
    from transformers.utils import cached_file

    try:
        path = cached_file(repo, filename, revision=revision)
    except (OSError, ValueError):
        return None
    match = _COMMIT_RE.search(Path(path).as_posix()) if path else None
    return match.group(1) if match else None


def hub_branches(repo: str) -> list[str]:
    """Branches of a hub model repo: from the hub when it can be reached, else the local cache's refs/."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        try:
            from huggingface_hub import HfApi

            return sorted(ref.name for ref in HfApi().list_repo_refs(repo).branches)
        except Exception:  # noqa: BLE001 - any hub failure falls back to what is cached
            pass
    refs = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "refs"
    return sorted(p.name for p in refs.iterdir() if p.is_file()) if refs.is_dir() else []


def _natural(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def resolve_commit(source: Source, revision: str | None = None) -> str:
    """The commit a hub model's `revision` (branch, tag or commit; None = main) points at now.

    Raises ModelLoadError (one line) when it cannot be resolved, listing the repo's branches and,
    for a final-step branch that does not exist, suggesting `main`.
    """
    if revision and _SHA_RE.match(revision):
        return revision
    commit = _hub_commit(source.location, revision, source.gguf_file or "config.json")
    if commit:
        return commit
    from huggingface_hub import constants

    branches = hub_branches(source.location)
    wanted = revision or "main"
    if branches and wanted in branches:  # the branch exists: the hub is out of reach and it is not cached
        where = (
            "the hub is offline (HF_HUB_OFFLINE=1)"
            if constants.HF_HUB_OFFLINE
            else "the hub cannot be reached"
        )
        raise ModelLoadError(
            f"cannot resolve {source.location}@{wanted} to a commit: {where} and this revision is not "
            "in the local Hugging Face cache; run once with hub access to cache it"
        )
    shown = sorted(branches, key=_natural)
    listing = ", ".join(shown[:12]) + (f", ... ({len(shown)} branches)" if len(shown) > 12 else "")
    hint = (
        " The final checkpoint is the `main` branch: use revision='main'."
        if wanted in FINAL_STEP_BRANCHES
        else ""
    )
    available = (
        f"available branches: {listing}."
        if shown
        else "no branches of it are known (offline and not cached)."
    )
    raise ModelLoadError(f"{source.location} has no revision {wanted!r}; {available}{hint}")


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


def weights_fingerprint(source: Source, revision: str | None = None) -> str:
    """Identity of the weights: ``hub:<commit>`` (the branch resolved now; an unresolvable revision is
    a ModelLoadError, never a key that could go stale), or sha256 over the local weight files and config."""
    if not source.local:
        return f"hub:{resolve_commit(source, revision)}"
    root = Path(source.location)
    if source.gguf_file:
        files = [root / source.gguf_file]
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
