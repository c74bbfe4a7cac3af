"""Where an entry lives and what it may hold: its key, the names of its files, and size bounds.

An entry is keyed by the sha256 of its spec (with RANK_FORMAT_VERSION) and lives in
``<root>/<key[:2]>/<key>/``; every bound here follows from the spec, so no read of an entry file is
unbounded. The guarantees built on these names are listed in docs/cache.md ("What the cache guarantees").
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from rbplab.core.settings import MANIFEST_FIELDS
from rbplab.core.stats import SUMMARY_VERSION

RANK_FORMAT_VERSION = 1
SUMMARY_FILE = f"summary-v{SUMMARY_VERSION}.parquet"  # the entry's summary (`summary_file`)

SHARD_SCHEMA = pa.schema(
    [
        ("doc_index", pa.int32()),  # dense index in corpus order
        ("doc_id", pa.string()),  # stable corpus id
        ("position", pa.int32()),  # index of the target token in the document's token sequence
        ("target_id", pa.int32()),
        ("n_greater", pa.int32()),
        ("n_equal", pa.int32()),
        ("nll", pa.float32()),
    ]
)
# The columns TokenStats is built from (doc_id and target_id are kept on disk for audits).
TOKEN_COLUMNS = ("doc_index", "position", "n_greater", "n_equal", "nll")

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")  # a key is one too
SHARD_RE = re.compile(r"^shard-(\d{5,})\.parquet$")
TEMPORARY_RE = re.compile(r"^\.(.+)\.tmp-\d+-[0-9a-f]+$")  # atomic_write's temporary of a cache file

# A summary file larger than this per token, plus a fixed allowance, is refused unread: a summary
# holds at most a few numbers per distinct rank, document and segment.
SUMMARY_BYTES_PER_TOKEN = 64
SUMMARY_BYTES_FIXED = 64 * 2**20

# Bounds on every file of an entry, so that no read is unbounded: a shard linked to /dev/zero or a
# sparse file declaring terabytes is refused before a byte of it is read.
MAX_SPEC_BYTES = 1 << 20  # spec.json (a few hundred bytes in practice)
MAX_RECORD_BYTES = 1 << 14  # a .sha256 record: {"sha256", "rows", "bytes", "producer", "head", "settled"}
MAX_ROW_BYTES = (1 << 12) + 64  # one parquet row at worst: six numbers and a document id (< 4 KiB)
SHARD_OVERHEAD_BYTES = 1 << 20  # parquet footer, schema and metadata of one shard
MANIFEST_BASE_BYTES = 1 << 20  # a manifest without its shard records (model, corpus, provenance)
MANIFEST_RECORD_BYTES = 1 << 10  # one shard record of a manifest, producer included
DEFAULT_MAX_SHARD_ROWS = 1 << 24  # for specs that do not say how shards are cut
DEFAULT_MAX_SHARDS = 1 << 18  # for specs without a token budget: 17 billion tokens at 65,536 per shard

# Parquet schema metadata every shard carries: which entry and which index it was written for.
ENTRY_KEY_META = b"rbplab.entry_key"  # the summary's too
SHARD_INDEX_META = b"rbplab.shard_index"
# ... and the summary: its version, |V|, its token count and the sum of squared nll (float.hex: exact).
SUMMARY_VERSION_META = b"rbplab.summary_version"
SUMMARY_VOCAB_META = b"rbplab.vocab_size"
SUMMARY_TOKENS_META = b"rbplab.n_tokens"
SUMMARY_NLL_SQ_META = b"rbplab.nll_sq_sum"

# Manifest fields that repeat a spec field: the typed spec names them (`rbplab.core.settings`);
# each is checked equal when the spec has the field, so a hand-edited manifest cannot change what
# a reader believes.
MIRRORED = MANIFEST_FIELDS

MISSING = object()  # what `lookup` returns for a path the data does not have


def shard_name(index: int) -> str:
    """The only file name shard `index` can have."""
    return f"shard-{index:05d}.parquet"


def shard_index(name: str) -> int | None:
    """The index of the shard file `name` (``shard-NNNNN.parquet``), None for any other name."""
    match = SHARD_RE.match(name)
    return int(match.group(1)) if match and name == shard_name(int(match.group(1))) else None


def checksum_name(name: str) -> str:
    """The name of the .sha256 record of the file `name` (a shard or the summary)."""
    return name + ".sha256"


def is_cache_file(name: str, *, temporary: bool = True) -> bool:
    """Whether `name` is a file name the cache itself writes inside an entry directory.

    The one list of those names: removal, resume, `verify` and archive import all ask here.
    spec.json, manifest.json, shard-NNNNN.parquet and its .sha256 record, the summary and its
    .sha256 record; with `temporary`, also the temporaries `atomic_write` makes of them
    (``.<name>.tmp-<pid>-<hex>``)."""
    if name in ("spec.json", "manifest.json", SUMMARY_FILE, checksum_name(SUMMARY_FILE)):
        return True
    temp = TEMPORARY_RE.match(name)
    if temp:
        return temporary and is_cache_file(temp.group(1), temporary=False)
    return shard_index(name[: -len(".sha256")] if name.endswith(".sha256") else name) is not None


def lookup(data: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in nested dicts, MISSING where a step is absent."""
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def count_at(spec: Any, path: tuple[str, ...]) -> int | None:
    """The positive integer at `path` of `spec`, None for anything else."""
    value = lookup(spec, path)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def max_shard_rows(spec: Any) -> int:
    """The most rows one shard can hold under `spec`. A shard closes once it reaches
    windows.shard_tokens targets and one window scores at most context_length - 1 targets, so
    shard_tokens + context_length - 2 (and never more than max_tokens)."""
    shard_tokens = count_at(spec, ("windows", "shard_tokens"))
    context = count_at(spec, ("windows", "context_length"))
    bound = shard_tokens + context - 2 if shard_tokens and context else DEFAULT_MAX_SHARD_ROWS
    budget = count_at(spec, ("max_tokens",))
    return min(bound, budget) if budget else bound


def max_shards(spec: Any) -> int:
    """The most shards an entry can have under `spec`: every shard but the last holds at least
    shard_tokens targets, so max_tokens // shard_tokens + 1 when there is a budget."""
    shard_tokens = count_at(spec, ("windows", "shard_tokens"))
    budget = count_at(spec, ("max_tokens",))
    return budget // shard_tokens + 1 if shard_tokens and budget else DEFAULT_MAX_SHARDS


def max_shard_bytes(rows: int) -> int:
    """The most bytes a shard of `rows` rows can take on disk."""
    return SHARD_OVERHEAD_BYTES + rows * MAX_ROW_BYTES


def max_summary_bytes(n_tokens: int | None) -> int:
    """The most bytes an entry's summary can take (a fixed allowance when the tokens are unknown)."""
    return SUMMARY_BYTES_FIXED + SUMMARY_BYTES_PER_TOKEN * (n_tokens or 0)


def max_manifest_bytes(spec: Any) -> int:
    """The most bytes the manifest of an entry of `spec` can take."""
    return MANIFEST_BASE_BYTES + MANIFEST_RECORD_BYTES * max_shards(spec)


# ---------------------------------------------------------------------------------------------
# Keys


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    raise TypeError(f"cache spec values must be JSON-serialisable, got {type(value).__name__}: {value!r}")


def canonical_json(spec: dict) -> str:
    """The exact text hashed into a key: sorted keys, no whitespace, with the rank format version."""
    payload = {"rank_format_version": RANK_FORMAT_VERSION, "spec": spec}
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )


def cache_key(spec: dict) -> str:
    """sha256 hex digest of the canonical JSON of `spec` (with RANK_FORMAT_VERSION)."""
    if not isinstance(spec, dict):
        raise TypeError(f"cache spec must be a dict, got {type(spec).__name__}")
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def sha256_hex(data: bytes) -> str:
    """The sha256 hex digest of `data`, as the .sha256 records hold it."""
    return hashlib.sha256(data).hexdigest()


def json_bytes(obj: dict) -> bytes:
    """The bytes the cache writes a JSON file (spec, record, manifest) as."""
    return (json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# Folders


def entry_dirs(root: Path) -> list[Path]:
    """Every entry directory (``<root>/<key[:2]>/<key>``), whatever its state: symbolic links to
    folders included, so that `verify` reports them (nothing is read through them)."""
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.glob("??/*") if p.is_dir() and SHA256_RE.match(p.name) and p.parent.name == p.name[:2]
    )


def matching_dirs(root: Path, prefix: str) -> list[Path]:
    """The entry directories whose key starts with `prefix` (any case)."""
    prefix = prefix.lower()
    return [p for p in entry_dirs(root) if p.name.startswith(prefix)]
