"""Fingerprints of a model's weights and tokenizer, the identity a rank cache is keyed on.

Weights: the hub commit for hub ids (the revision resolved now, through the hub or, when it
cannot be reached, the local hub cache layout; a revision that cannot be resolved is a one-line
error, never a key that could go stale), else sha256 over the local weight files and config
(path-independent). Tokenizer: sha256 over everything that decides token ids.

A local fingerprint names the bytes that were scored, not the bytes that were there when the run
was planned: each file's digest is memoised by its full stat identity (path, size, mtime, ctime,
inode, device; a user process can put mtime back but not ctime), and the `WeightFiles` a
description keeps are checked again once the weights are loaded, after every shard is scored and
before the manifest is written (`WeightFiles.check`): a file whose stat changed is hashed again,
and one whose bytes now differ from the fingerprint is a `WeightsChangedError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
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


class WeightsChangedError(ModelLoadError):
    """A local model's weight file changed between the moment its fingerprint was taken (the run's
    cache key) and the moment its bytes were used; nothing is written under that key."""


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file without reading it: equal stamps mean the file was
    not written in between (ctime moves on every write, and no user process can set it back)."""

    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: str | Path) -> FileStamp:
        info = os.stat(path)  # the file a loader opens: a link's target
        return cls(str(path), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


@dataclass(frozen=True)
class WeightFiles:
    """The local files a weights fingerprint was computed from, as they were when hashed."""

    root: str
    gguf_file: str | None
    stamps: tuple[FileStamp, ...]
    fingerprint: str

    def changed(self) -> list[str]:
        """The files (paths) that were written, replaced, removed or added since they were hashed
        (stat calls and one listing: nothing is read)."""
        try:
            paths = {str(f) for f in _weight_files(Path(self.root), self.gguf_file)}
        except OSError:  # the folder itself is gone or unreadable
            return [s.path for s in self.stamps]
        changed = [s.path for s in self.stamps if s.path not in paths or _stamp_or_none(s.path) != s]
        return changed + sorted(paths - {s.path for s in self.stamps})

    def check(self, when: str) -> None:
        """Raise WeightsChangedError (naming the file and `when` it was found) unless the files
        still hold the bytes the fingerprint names; a file whose stat changed is hashed again
        (touched, or rewritten with the same bytes, passes)."""
        changed = self.changed()
        if not changed:
            return
        try:
            now = "sha256:" + files_digest(_weight_files(Path(self.root), self.gguf_file), Path(self.root))
        except (OSError, WeightsChangedError):
            now = None
        if now != self.fingerprint:
            raise WeightsChangedError(
                f"the weight file {changed[0]} changed {when} (the run is keyed by its earlier bytes); "
                "nothing was written for this run: run it again once the model's files stay unchanged"
            )


def identify(model: ResolvedModel) -> tuple[str | None, str, WeightFiles | None]:
    """(the commit a hub model's revision points at now, None for a local model; the weights
    fingerprint; the local files it was computed from, None for a hub model). Resolved once per
    description, so config, tokenizer and weights all load at that commit and a branch moving
    meanwhile cannot mix them."""
    if model.local:
        files = local_weight_files(model)
        return None, files.fingerprint, files
    commit = resolve_commit(model)
    return commit, f"hub:{commit}", None


# Digests of file versions already read, by their full stamp (the models of a grid, hashed once).
_DIGESTS: OrderedDict[FileStamp, str] = OrderedDict()
_DIGESTS_SIZE = 64
_DIGESTS_LOCK = threading.Lock()


def _stamp_or_none(path: str) -> FileStamp | None:
    try:
        return FileStamp.of(path)
    except OSError:
        return None


def _file_sha256(path: Path) -> tuple[FileStamp, str]:
    """(stamp, sha256) of one version of the file at `path`, memoised by the stamp. A file written
    while it is read (its stamp differs after reading) is a WeightsChangedError."""
    before = FileStamp.of(path)
    with _DIGESTS_LOCK:
        if before in _DIGESTS:
            _DIGESTS.move_to_end(before)
            return before, _DIGESTS[before]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if _stamp_or_none(str(path)) != before:
        raise WeightsChangedError(
            f"the weight file {path} changed while it was being hashed; run again once the model's "
            "files stay unchanged"
        )
    with _DIGESTS_LOCK:
        _DIGESTS[before] = digest.hexdigest()
        while len(_DIGESTS) > _DIGESTS_SIZE:
            _DIGESTS.popitem(last=False)
    return before, digest.hexdigest()


def _digest(files: list[Path], root: Path) -> tuple[str, tuple[FileStamp, ...]]:
    digest, stamps = hashlib.sha256(), []
    for file in sorted(files):
        stamp, file_hash = _file_sha256(file)
        stamps.append(stamp)
        digest.update(f"{file.relative_to(root).as_posix()}\0{file_hash}\n".encode())
    return digest.hexdigest(), tuple(stamps)


def files_digest(files: list[Path], root: Path) -> str:
    """sha256 over the relative names and contents of `files` (each file's hash memoised by its
    stamp: size, mtime, ctime, inode and device)."""
    return _digest(files, root)[0]


def _weight_files(root: Path, gguf_file: str | None) -> list[Path]:
    if gguf_file:
        return [root / gguf_file]
    files = [p for p in root.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)]
    return [*files, root / "config.json"]


def local_weight_files(model: ResolvedModel) -> WeightFiles:
    """The weight files (and config) of a local model, hashed now: its fingerprint and stamps."""
    root = Path(model.location)
    digest, stamps = _digest(_weight_files(root, model.gguf_file), root)
    return WeightFiles(str(root), model.gguf_file, stamps, "sha256:" + digest)


def weights_fingerprint(model: ResolvedModel) -> str:
    """Identity of the weights: ``hub:<commit>`` (the branch resolved now; an unresolvable revision is
    a ModelLoadError, never a key that could go stale), or sha256 over the local weight files and config."""
    if not model.local:
        return f"hub:{resolve_commit(model)}"
    return local_weight_files(model).fingerprint


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
