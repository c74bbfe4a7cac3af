"""The cache key of a request already planned on this machine, found without loading model code.

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
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora.corpus import Corpus, LazyCorpus
from rbplab.catalog.models import ModelLoadError, ResolvedModel
from rbplab.core.documents import parse_json
from rbplab.core.entry_spec import EntrySpec
from rbplab.core.settings import ExtractionSettings
from rbplab.core.versions import installed_versions
from rbplab.extraction.fingerprints import files_digest, resolve_commit, weights_fingerprint
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import canonical_json
from rbplab.store.cache.reading import CacheError
from rbplab.store.files import atomic_write, cache_root, ensure_real_dir, read_entry_file

RECORD_VERSION = 1
PLANS_DIR = "plans"
MAX_RECORD_BYTES = 1 << 16
DEFAULT_SHARD_TOKENS = 1 << 16  # plan.SHARD_TOKENS (a test keeps them equal)
_LIBRARIES = ("rbplab", "transformers", "tokenizers", "gguf")
# Settings that do not enter the key (how fast, not what).
_UNKEYED = ("batch_tokens",)


@dataclass(frozen=True)
class KnownPlan:
    """A request's entry, found through its plan record: key and the model's non-embedding size S
    (the entry's manifest's, which the record agrees with)."""

    key: str
    n_nonembedding: float
    spec: EntrySpec


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
            shard_tokens=settings.shard_tokens or DEFAULT_SHARD_TOKENS,
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
            stacklevel=2,
        )
        return None
    return KnownPlan(entry.key, float(recorded), typed)


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
