"""Fingerprints of a model's weights and tokenizer, the identity a rank cache is keyed on.

Weights: the hub commit for hub ids (read from the local hub cache layout), else sha256 over
the local weight files and config (path-independent). Tokenizer: sha256 over everything that
decides token ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from rbplab.extraction.sources import Source

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_COMMIT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/")


def _hub_commit(repo: str, revision: str | None, filename: str = "config.json") -> str | None:
    """Commit hash of a hub repo at `revision`, read from the local hub cache layout."""
    from transformers.utils import cached_file

    try:
        path = cached_file(repo, filename, revision=revision)
    except (OSError, ValueError):
        return None
    match = _COMMIT_RE.search(Path(path).as_posix()) if path else None
    return match.group(1) if match else None


@lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _files_digest(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(files):
        stat = file.stat()
        file_hash = _file_sha256(str(file), stat.st_size, stat.st_mtime_ns)
        digest.update(f"{file.relative_to(root).as_posix()}\0{file_hash}\n".encode())
    return digest.hexdigest()


def weights_fingerprint(source: Source, revision: str | None = None) -> str:
    """Identity of the weights: hub commit, or sha256 over the local weight files and config."""
    if not source.local:
        commit = _hub_commit(source.location, revision, source.gguf_file or "config.json")
        return f"hub:{commit}" if commit else f"hub-unpinned:{source.location}@{revision or 'main'}"
    root = Path(source.location)
    if source.gguf_file:
        files = [root / source.gguf_file]
    else:
        files = [p for p in root.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)]
        files.append(root / "config.json")
    return "sha256:" + _files_digest(files, root)


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
