"""Which model a run used, and what this machine already planned, without model code (no torch, no
transformers): weights fingerprints, and the plans known here that find a request's entry.

The cache key of a request already planned on this machine, found without loading model code.

Planning a run (`plan.plan_extraction`) derives its key from the model's config, tokenizer and
a meta-device instance of its architecture: seconds of torch and transformers imports, paid again
by every analysis of a warm cache. A *plan record* remembers what one planning derived: the entry
key for a request, under ``<cache>/plans/<sha256 of the request>.json``. A request is everything
the key is a function of, read without torch or transformers: the model's files (the sha256 of
its weights and config, and of its other files — the tokenizer's — or its hub commit), the corpus
key, the settings, the versions of rbplab, transformers and tokenizers, and the device kind (a
record is used only on a machine that can only run on the CPU, where dtype "auto" is float32).

Derive, never trust: a record is used only when its request equals the one derived now, and the
entry it names is then checked against everything the request fixes (the spec's weights
fingerprint, corpus identity and every setting it pins). A record that fails any check is
ignored, and the caller plans the run the slow way (and writes a fresh record).

The model's size S that the record also holds is never used on the record's word: S is what the
entry's manifest records (written by the process that scored the weights the spec's fingerprint
names), and a record whose S differs from it is ignored with a warning, the run planned again (S
derived from the model's config) and the record written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.catalog.models import ModelLoadError, ResolvedModel
from rbplab.core.documents import parse_json
from rbplab.core.errors import RbplabWarning
from rbplab.core.settings import EntrySpec, ExtractionSettings, installed_versions
from rbplab.store import hub
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import canonical_json
from rbplab.store.cache.reading import CacheError
from rbplab.store.files import atomic_write, cache_root, ensure_real_dir, read_entry_file

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


RECORD_VERSION = 1
PLANS_DIR = "plans"
MAX_RECORD_BYTES = 1 << 16
DEFAULT_SHARD_TOKENS = 1 << 16  # plan.SHARD_TOKENS (a test keeps them equal)
_LIBRARIES = ("rbplab", "transformers", "tokenizers", "gguf")
# Settings that do not enter the key (how fast, not what). Records are kept for the final layer's
# plan only, whose key the layers asked beside it do not change.
_UNKEYED = ("batch_tokens", "layers")


@dataclass(frozen=True)
class KnownPlan:
    """A request's entry, found through its plan record: key and the model's non-embedding size S
    (the entry's manifest's, which the record agrees with); `rows`, the rows of each shard its
    corpus, tokenizer and spec give, when the planning that wrote the record had derived them (an
    extraction or its hit check tokenized the corpus): what a cached `rbplab extract` checks the
    manifest against without tokenizing again; None otherwise."""

    key: str
    n_nonembedding: float
    spec: EntrySpec
    rows: tuple[int, ...] | None = None


def cpu_only(settings: ExtractionSettings) -> bool:
    """Whether this run can only resolve to the CPU, decided without torch: device "cpu", or
    "auto" on a machine with no sign of a GPU (NVIDIA or AMD device nodes, Apple silicon)."""
    if settings.device_map:
        return False
    if settings.device == "cpu":
        return True
    if settings.device != "auto":
        return False
    gpu_signs = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
    return not any(Path(p).exists() for p in gpu_signs) and platform.system() != "Darwin"


def _directory_files(root: Path, weights: bool) -> list[Path]:
    # Every regular file of a model folder (not its checkpoints/ subfolders): with or without weights.
    suffixes = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
    return [p for p in root.iterdir() if p.is_file() and (weights or not p.name.endswith(suffixes))]


def _local_identity(location: str) -> str:
    root = Path(location)
    return "sha256:" + files_digest(_directory_files(root, weights=False), root)


def request(
    model: ResolvedModel,
    corpus: Corpus | LazyCorpus,
    settings: ExtractionSettings,
    fingerprint: str | None = None,
) -> dict | None:
    """Everything the cache key of (model, corpus, settings) is a function of, derived without torch
    or transformers; None when this cannot be decided here (a GPU may be used, a hub tokenizer
    override, a hub commit that cannot be resolved offline). `fingerprint`: the weights fingerprint
    when a planning already derived it (not derived again)."""
    if not cpu_only(settings):
        return None
    try:
        if model.local:
            identity = _local_identity(model.location)
            tokenizer_files = _local_identity(model.tokenizer_location) if model.tokenizer_location else None
            files = {
                "weights": fingerprint or weights_fingerprint(model),
                "files": identity,
                "tokenizer_files": tokenizer_files,
            }
        else:
            files = {"weights": fingerprint or f"hub:{resolve_commit(model)}"}
        tokenizer = None
        if model.tokenizer:
            path = Path(model.tokenizer).expanduser()
            if not path.is_dir():
                return None
            tokenizer = _local_identity(str(path.resolve()))
    except (ModelLoadError, OSError, ValueError):
        return None
    keyed = {k: v for k, v in settings.to_dict().items() if k not in _UNKEYED}
    return {
        "version": RECORD_VERSION,
        "model": {
            "location": model.location,
            "gguf_file": model.gguf_file,
            "revision": model.revision,
            "trust_remote_code": model.trust_remote_code,
            "tokenizer": tokenizer,
            **files,
        },
        "corpus": corpus.key(),
        "settings": keyed,
        "libraries": installed_versions(_LIBRARIES),
        "device": "cpu",
    }


def _record_path(root: Path, req: dict) -> Path:
    name = hashlib.sha256(canonical_json(req).encode()).hexdigest()
    return root / PLANS_DIR / name[:2] / f"{name}.json"


def record_plan(plan: Any, cache_dir: str | Path | None) -> None:
    """Write the plan record of a request the slow path just planned (`plan`: a `plan.Plan`).
    Best effort: a cache that cannot be written keeps no record, and nothing else changes."""
    info = plan.described.info
    req = request(plan.described.model, plan.corpus, plan.settings, info.fingerprint)
    if req is None:
        return
    root = cache_root(cache_dir)
    path = _record_path(root, req)
    record = {
        "request": req,
        "key": CacheEntry(root, plan.spec).key,
        "n_nonembedding": int(info.n_nonembedding),
    }
    if "shards" in vars(plan):  # derived already (a hit check or an extraction tokenized the corpus)
        record["rows"] = [sum(w.n_scored for w in shard) for shard in plan.shards]
    try:
        ensure_real_dir(root / PLANS_DIR, "the plans folder")
        ensure_real_dir(path.parent, "a plans folder")
        atomic_write(path, (json.dumps(record, sort_keys=True) + "\n").encode())
    except OSError:
        pass


def known_plan(
    model: ResolvedModel, corpus: Corpus | LazyCorpus, settings: ExtractionSettings, cache_dir
) -> KnownPlan | None:
    """The complete entry a request was planned to before, checked against the request; None
    when there is no record, it does not hold, or the entry is not complete."""
    req = request(model, corpus, settings)
    if req is None:
        return None
    root = cache_root(cache_dir)
    path = _record_path(root, req)
    try:
        record = parse_json(read_entry_file(path, path.parent, MAX_RECORD_BYTES), f"plan record {path}")
        if not isinstance(record, dict) or record.get("request") != req:
            return None
        n_nonembedding = record.get("n_nonembedding")
        if not isinstance(n_nonembedding, int) or isinstance(n_nonembedding, bool) or n_nonembedding <= 0:
            return None
        entry = CacheEntry.open(str(record.get("key", "")), root)
    except (OSError, ValueError, CacheError):
        return None
    typed = EntrySpec.parse(entry.spec)
    if typed is None or not entry.is_complete():
        return None
    fixed = req["model"]  # the weights, GGUF file and remote-code choice the request fixes
    agrees = (
        typed.model.fingerprint == fixed["weights"]
        and typed.model.gguf_file == fixed["gguf_file"]
        and typed.model.trust_remote_code == fixed["trust_remote_code"]
        and typed.corpus.to_json() == req["corpus"]
        # CPU only (cpu_only), so dtype "auto" is float32
        and typed.pins(
            settings,
            dtype="float32" if settings.dtype == "auto" else settings.dtype,
            shard_tokens=settings.shard_tokens,  # None: any cut (resolve_entries may record one)
        )
    )
    if not agrees:
        return None
    recorded = _manifest_size(entry)
    if recorded != n_nonembedding:
        said = "records none" if recorded is None else f"records S = {recorded:,}"
        warnings.warn(
            f"plan record {path.name[:12]} gives S = {n_nonembedding:,} for cache entry {entry.key[:12]}, "
            f"whose manifest {said}; the record is ignored, the run planned again and its record rewritten",
            RbplabWarning,
            stacklevel=2,
        )
        return None
    rows = record.get("rows")
    counted = isinstance(rows, list) and all(
        isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows
    )
    return KnownPlan(entry.key, float(recorded), typed, tuple(rows) if counted else None)


def _manifest_size(entry: CacheEntry) -> int | None:
    """S as the entry's manifest records it (model.n_nonembedding), None when it records none; the
    manifest's own rules are applied when its summary is read."""
    try:
        manifest = entry.load_manifest()
    except (OSError, ValueError):
        return None
    model = manifest.get("model") if isinstance(manifest, dict) else None
    size = model.get("n_nonembedding") if isinstance(model, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
