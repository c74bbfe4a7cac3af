"""Content-addressed cache of per-token rank statistics.

An entry is keyed by the sha256 of everything that changes the numbers (the spec
dict the extractor builds, plus RANK_FORMAT_VERSION) and lives in
``<root>/<key[:2]>/<key>/``:

    spec.json                  the spec the key was computed from (written first)
    shard-00000.parquet        per-token rows (columns: SHARD_SCHEMA)
    shard-00000.parquet.sha256 {"sha256", "rows", "bytes"} of that shard, written after it
    summary-v1.parquet         the entry's sufficient statistics (`rbplab.store.summaries`),
    summary-v1.parquet.sha256  written from the verified shards just before the manifest (an
                               entry cached before summaries existed gets them on first read)
    manifest.json              written last: its presence means the entry is complete

Every file is written to a temporary name, fsynced and atomically renamed
(`rbplab.store.files.atomic_write`), so a killed run leaves either whole files or stray
temporaries (removed by the next writer), never a partial shard that looks finished.
Derive, never trust: nothing read back from an entry is believed unless it can be derived
again. The key is recomputed from ``spec.json`` and must equal the directory name and the
manifest's key; shard files are named from their index only (a manifest naming any other
file is damaged, and no path from a manifest is ever opened); the shard records are exactly
0..n-1, their rows sum to ``n_tokens``, and every manifest field that mirrors the spec
(vocab_size, settings, model and corpus identity; `MIRRORED`) equals the spec's. Each shard
carries its entry key and index in its own parquet metadata, checked on read and on resume,
so a shard copied from elsewhere is rejected. Shards written before the metadata existed
(no rbplab keys at all) are accepted on read through the manifest's checksum only, and
recomputed on resume.

A shard counts as done only if its checksum file exists and matches and its metadata names
this entry and index; otherwise it is reported with a warning and deleted so the extractor
recomputes it. Reading a complete entry re-checks all of the above. A violation raises
CacheCorruptedError naming the entry and the rule; the manifest (and a bad shard) is then
removed so the entry becomes incomplete and re-running the same extraction recomputes just
what is missing. Reading a damaged entry never returns numbers. `CacheEntry.problems`
reports the same rules without deleting anything (`rbplab cache verify`).

Deletion only ever touches files inside an entry directory whose names the cache itself
generates (`is_cache_file`). `list_entries` and `remove_entries` read and delete whole
entries (under their write lock); removal refuses empty or short key prefixes.

Writers hold a per-key file lock (``<root>/locks/<key>.lock``), so two processes
extracting the same (model, corpus, settings) never interleave their shards.

Hostile files, not only hostile JSON. Every file of an entry is read through
`rbplab.store.files.read_entry_file`: never through a symbolic link below the cache root (at the
prefix folder, the entry folder or the file), never anything but a regular file (a FIFO is not
opened, so nothing blocks; a device is not opened, so nothing streams), and never more bytes than
the file can hold: a shard exactly the bytes its records give, a record, spec or manifest a bound
that follows from the spec (`max_shard_rows`, `max_manifest_bytes`). The records themselves are
bounded by the spec: no shard holds more than shard_tokens + context_length - 2 rows, every shard
but the last holds at least shard_tokens, and n_tokens never exceeds max_tokens. A complete
entry's ``.sha256`` files must agree with its manifest. Writers refuse an entry whose folder or
prefix folder is a symbolic link or whose lock file is not a regular file, and clear cache-named
items that are not regular files (links, FIFOs, empty folders) before they write; `problems`
reports all of it. Removal deletes manifest.json first and spec.json last, so an interrupted
removal leaves an incomplete entry, never one that reads as complete.

What the store cannot know is how many tokens and shards an entry must have: that follows from
the corpus and the tokenizer (`rbplab.extraction.pipeline.count_problems`, used by `extract`
and `rbplab run` before calling an entry a hit, `load_stats` and `rbplab cache verify`). Reading
through `CacheEntry` alone does not derive them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import stat
import sys
import warnings
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from rbplab.core.entry_spec import MANIFEST_FIELDS, EntrySpec
from rbplab.core.errors import RbplabError
from rbplab.core.stats import TokenStats
from rbplab.core.summary import SUMMARY_VERSION, EntrySummary, summarize
from rbplab.store.files import (
    UnsafeFileError,
    atomic_write,
    cache_root,
    check_writable,
    ensure_entry_dir,
    ensure_real_dir,
    entry_dir_problem,
    entry_file_problem,
    file_kind,
    location_error,
    read_entry_file,
)
from rbplab.store.summaries import SUMMARY_FILE, SummaryError, parse_summary, summary_bytes

RANK_FORMAT_VERSION = 1

ENTRY_COLUMNS = [
    "key",
    "model",
    "revision",
    "step",
    "corpus",
    "max_tokens",
    "context_length",
    "n_tokens",
    "complete",
    "status",
    "size_bytes",
    "created",
    "path",
]

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

_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_SHARD_RE = re.compile(r"^shard-(\d{5,})\.parquet$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_TEMP_RE = re.compile(r"^\.(.+)\.tmp-\d+-[0-9a-f]+$")  # atomic_write's temporary of a cache file
# A summary file larger than this per token, plus a fixed allowance, is refused unread: a summary
# holds at most a few numbers per distinct rank, document and segment.
_SUMMARY_BYTES_PER_TOKEN = 64
_SUMMARY_BYTES_FIXED = 64 * 2**20

MIN_PREFIX = 8  # shortest key prefix `remove_entries` accepts

# Bounds on every file of an entry, so that no read is unbounded: a shard linked to /dev/zero or a
# sparse file declaring terabytes is refused before a byte of it is read.
MAX_SPEC_BYTES = 1 << 20  # spec.json (a few hundred bytes in practice)
MAX_RECORD_BYTES = 1 << 14  # a .sha256 record: {"sha256", "rows", "bytes", "producer"}
MAX_ROW_BYTES = (1 << 12) + 64  # one parquet row at worst: six numbers and a document id (< 4 KiB)
SHARD_OVERHEAD_BYTES = 1 << 20  # parquet footer, schema and metadata of one shard
MANIFEST_BASE_BYTES = 1 << 20  # a manifest without its shard records (model, corpus, provenance)
MANIFEST_RECORD_BYTES = 1 << 10  # one shard record of a manifest, producer included
DEFAULT_MAX_SHARD_ROWS = 1 << 24  # for specs that do not say how shards are cut
DEFAULT_MAX_SHARDS = 1 << 18  # for specs without a token budget: 17 billion tokens at 65,536 per shard

# Parquet schema metadata every shard carries: which entry and which index it was written for.
SHARD_KEY_META = b"rbplab.entry_key"
SHARD_INDEX_META = b"rbplab.shard_index"

# Manifest fields that repeat a spec field: the typed spec names them (`rbplab.core.entry_spec`);
# each is checked equal when the spec has the field, so a hand-edited manifest cannot change what
# a reader believes.
MIRRORED = MANIFEST_FIELDS


def shard_name(index: int) -> str:
    """The only file name shard `index` can have."""
    return f"shard-{index:05d}.parquet"


def shard_index(name: str) -> int | None:
    """The index of the shard file `name` (``shard-NNNNN.parquet``), None for any other name."""
    match = _SHARD_RE.match(name)
    return int(match.group(1)) if match and name == shard_name(int(match.group(1))) else None


def is_cache_file(name: str, *, temporary: bool = True) -> bool:
    """Whether `name` is a file name the cache itself writes inside an entry directory.

    The one list of those names: removal, resume, `verify` and archive import all ask here.
    spec.json, manifest.json, shard-NNNNN.parquet and its .sha256 record, the summary and its
    .sha256 record; with `temporary`, also the temporaries `atomic_write` makes of them
    (``.<name>.tmp-<pid>-<hex>``)."""
    if name in ("spec.json", "manifest.json", SUMMARY_FILE, SUMMARY_FILE + ".sha256"):
        return True
    temp = _TEMP_RE.match(name)
    if temp:
        return temporary and is_cache_file(temp.group(1), temporary=False)
    return shard_index(name[: -len(".sha256")] if name.endswith(".sha256") else name) is not None


def _count_at(spec: Any, path: tuple[str, ...]) -> int | None:
    value = _lookup(spec, path)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def max_shard_rows(spec: Any) -> int:
    """The most rows one shard can hold under `spec`. A shard closes once it reaches
    windows.shard_tokens targets and one window scores at most context_length - 1 targets, so
    shard_tokens + context_length - 2 (and never more than max_tokens)."""
    shard_tokens = _count_at(spec, ("windows", "shard_tokens"))
    context = _count_at(spec, ("windows", "context_length"))
    bound = shard_tokens + context - 2 if shard_tokens and context else DEFAULT_MAX_SHARD_ROWS
    budget = _count_at(spec, ("max_tokens",))
    return min(bound, budget) if budget else bound


def max_shards(spec: Any) -> int:
    """The most shards an entry can have under `spec`: every shard but the last holds at least
    shard_tokens targets, so max_tokens // shard_tokens + 1 when there is a budget."""
    shard_tokens = _count_at(spec, ("windows", "shard_tokens"))
    budget = _count_at(spec, ("max_tokens",))
    return budget // shard_tokens + 1 if shard_tokens and budget else DEFAULT_MAX_SHARDS


def max_shard_bytes(rows: int) -> int:
    """The most bytes a shard of `rows` rows can take on disk."""
    return SHARD_OVERHEAD_BYTES + rows * MAX_ROW_BYTES


def max_summary_bytes(n_tokens: int | None) -> int:
    """The most bytes an entry's summary can take (a fixed allowance when the tokens are unknown)."""
    return _SUMMARY_BYTES_FIXED + _SUMMARY_BYTES_PER_TOKEN * (n_tokens or 0)


def max_manifest_bytes(spec: Any) -> int:
    """The most bytes the manifest of an entry of `spec` can take."""
    return MANIFEST_BASE_BYTES + MANIFEST_RECORD_BYTES * max_shards(spec)


def _record_problem(record: Any, spec: Any) -> str | None:
    """What is wrong with a shard's checksum record ({"sha256", "rows", "bytes", ...}), or None."""
    if not isinstance(record, dict):
        return "is not a record"
    if not isinstance(record.get("sha256"), str) or not _SHA_RE.match(record["sha256"]):
        return "has no valid sha256"
    rows = record.get("rows")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        return "has no valid row count"
    if rows > max_shard_rows(spec):
        return f"claims {rows} rows, more than one shard holds under its spec ({max_shard_rows(spec)})"
    size = record.get("bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        return "has no valid byte count"
    if size > max_shard_bytes(rows):
        return f"claims {size} bytes, more than a shard of {rows} rows takes ({max_shard_bytes(rows)})"
    return None


class CacheError(RbplabError, RuntimeError):
    """A cache entry cannot be used as asked (incomplete, locked, unknown key, ...)."""


class CacheCorruptedError(CacheError):
    """A complete entry failed its checks; it has been marked incomplete (when writable)."""


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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for package in ("rbplab", "torch", "transformers", "tokenizers", "pyarrow", "pandas", "numpy"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    return out


# ---------------------------------------------------------------------------------------------
# Entries


class CacheEntry:
    """One (model, corpus, settings) result in the cache; see the module docstring for the layout."""

    def __init__(self, root: str | Path | None, spec: dict | EntrySpec):
        self.root = cache_root(root)
        spec = spec.to_json() if isinstance(spec, EntrySpec) else spec
        self.spec = spec
        self.key = cache_key(spec)
        self.path = self.root / self.key[:2] / self.key
        self._lock_depth = 0
        self._file_lock: FileLock | None = None

    def __repr__(self) -> str:
        state = "complete" if self.is_complete() else "incomplete"
        return f"CacheEntry(key={self.key[:12]}..., {state}, path={self.path})"

    @classmethod
    def open(cls, key: str, root: str | Path | None = None) -> CacheEntry:
        """The existing entry whose key starts with `key` (a unique prefix is enough)."""
        root = cache_root(root)
        full = key.lower()
        if _KEY_RE.match(full):  # a whole key names one directory: no need to list the cache
            path = root / full[:2] / full
            matches = [path] if path.is_dir() else []  # as `entry_dirs` lists it, links included
        else:
            matches = _matching_dirs(root, key)
        if not matches:
            raise CacheError(f"no cache entry with key {key!r} under {root}")
        if len(matches) > 1:
            raise CacheError(f"key prefix {key!r} matches {len(matches)} cache entries; give more characters")
        spec = _read_spec(matches[0])
        if spec is None:
            raise CacheError(
                f"cache entry {matches[0].name[:12]} at {matches[0]} is damaged: no spec.json that hashes "
                "to its directory name; remove it (rbplab cache rm)"
            )
        return cls(root, spec)

    # -- files -----------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.key}.lock"

    def shard_path(self, index: int) -> Path:
        return self.path / shard_name(index)

    @staticmethod
    def _checksum_path(shard: Path) -> Path:
        return shard.with_name(shard.name + ".sha256")

    def read_file(self, name: str, max_bytes: int) -> bytes:
        """The bytes of the entry's file `name`, read by `read_entry_file` (no links, regular files
        only, at most `max_bytes`). FileNotFoundError when it is missing; UnsafeFileError (an
        OSError) when it is refused; other OSErrors pass through."""
        return read_entry_file(self.path / name, self.path, max_bytes)

    def odd_items(self) -> list[str]:
        """One line per cache-named item of the entry folder that is not a regular file (a link, a
        FIFO, a device, a folder): the cache never writes one. Nothing is followed or opened."""
        if entry_dir_problem(self.path) is not None or not self.path.is_dir():
            return []
        found = []
        for item in sorted(self.path.iterdir()):
            if is_cache_file(item.name, temporary=False):
                problem = entry_file_problem(item)
                if problem is not None:
                    found.append(problem)
        return found

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[CacheEntry]:
        """Hold the entry's write lock (one writer per key across processes).

        Checks up front that the cache location is writable, so a run fails before any
        model is loaded. `timeout` None waits indefinitely; on expiry CacheError is raised.
        """
        check_writable(self.root)
        self._check_folders()
        lock_problem = entry_file_problem(self.lock_path)
        if lock_problem is not None:
            raise CacheError(
                f"cache entry {self.key[:12]}: its lock file {lock_problem}; refusing to write (remove "
                f"{self.lock_path})"
            )
        if self._file_lock is None:
            # One FileLock per entry object, so nested lock() calls re-enter instead of deadlocking.
            self._file_lock = FileLock(str(self.lock_path))
        lock = self._file_lock
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except Timeout as err:
            raise CacheError(
                f"cache entry {self.key[:12]} is locked by another process ({self.lock_path}); "
                "wait for it to finish (locks are released when a process exits)"
            ) from err
        except RuntimeError as err:  # filelock refuses to wait on a lock this very thread holds
            raise CacheError(f"cache entry {self.key[:12]} is already locked in this process: {err}") from err
        self._lock_depth += 1
        try:
            if self._lock_depth == 1:
                self._remove_temporaries()
                self._clear_odd_items()
                if self._spec_problem() is not None:  # missing, or not this entry's (a cache file)
                    atomic_write(self.path / "spec.json", _dump(self.spec))
            yield self
        finally:
            self._lock_depth -= 1
            lock.release()

    @property
    def locked(self) -> bool:
        return self._lock_depth > 0

    def discard_if_unstarted(self) -> bool:
        """Remove the entry folder when it holds nothing but spec.json (and temporaries of failed
        writes): what a run that failed before finishing its first shard leaves. Finished shards
        stay (a rerun resumes from them). Skipped, returning False, while another process holds
        the entry's lock; a writer that comes later recreates the folder and its spec.json."""
        if entry_dir_problem(self.path) is not None or not self.path.is_dir():
            return False
        try:
            with self.lock(timeout=0):  # removes the temporaries of dead writers
                if any(item.name != "spec.json" for item in self.path.iterdir()):
                    return False
                remove_entry_dir(self.path)
        except (CacheError, OSError):
            return False
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # the <key[:2]> folder, when now empty
        return True

    def _check_folders(self) -> None:
        """Create the locks folder and the entry folder, refusing (CacheError) to write through a
        symbolic link at either, or at the entry's prefix folder."""
        try:
            ensure_real_dir(self.root / "locks", "the locks folder")
            ensure_entry_dir(self.path)
        except UnsafeFileError as err:
            raise CacheError(
                f"cache entry {self.key[:12]}: {err}; refusing to write through it (remove that link; "
                "rbplab cache rm removes a linked entry folder, never its target)"
            ) from None
        except OSError as err:
            raise location_error(err, self.path) from err

    def temporaries(self) -> list[Path]:
        """Temporary files of interrupted writes (only the lock holder may delete them)."""
        if entry_dir_problem(self.path) is not None or not self.path.is_dir():
            return []
        return sorted(
            p for p in self.path.glob(".*.tmp-*") if is_cache_file(p.name) and _TEMP_RE.match(p.name)
        )

    def _remove_temporaries(self) -> None:
        # Only the lock holder may do this: temporaries belong to dead writers then.
        for tmp in self.temporaries():
            if not tmp.is_dir() or tmp.is_symlink():
                with contextlib.suppress(OSError):
                    tmp.unlink()

    def _clear_odd_items(self) -> None:
        """Delete cache-named items that are not regular files (links, FIFOs, devices, sockets; the
        link itself, never its target) and empty folders, so no write goes through them. A folder
        with contents under a cache name stops the writer. Only the lock holder calls this."""
        for item in sorted(self.path.iterdir()):
            problem = entry_file_problem(item) if is_cache_file(item.name, temporary=False) else None
            if problem is None:
                continue
            try:
                if item.is_dir() and not item.is_symlink():
                    item.rmdir()
                else:
                    item.unlink()
            except OSError as err:
                raise CacheError(
                    f"cache entry {self.key[:12]}: {problem} and cannot be removed ({err.strerror or err}); "
                    f"remove {item} by hand"
                ) from None
            warnings.warn(f"cache entry {self.key[:12]}: {problem}; it was removed", stacklevel=4)

    def _spec_problem(self) -> str | None:
        """Why spec.json is not this entry's spec, or None."""
        try:
            on_disk = json.loads(self.read_file("spec.json", MAX_SPEC_BYTES))
        except FileNotFoundError:
            return "spec.json is missing"
        except UnsafeFileError as err:
            return str(err)
        except (OSError, ValueError) as err:
            return f"spec.json is unreadable ({err})"
        try:
            key = cache_key(on_disk)
        except TypeError:
            return "spec.json is not a JSON object"
        if key != self.key:
            return f"spec.json hashes to {key[:12]}, not to the entry's key (copied from another entry?)"
        return None

    def encode_shard(self, index: int, frame: pd.DataFrame) -> bytes:
        """The exact bytes shard `index` of this entry is stored as, for rows `frame` (SHARD_SCHEMA
        columns): zstd parquet carrying the entry key and index in its schema metadata."""
        if index < 0:
            raise ValueError(f"shard index must be >= 0, got {index}")
        missing = [name for name in SHARD_SCHEMA.names if name not in frame.columns]
        if missing:
            raise ValueError(f"shard frame lacks columns {missing}; required: {SHARD_SCHEMA.names}")
        table = pa.Table.from_pandas(frame[SHARD_SCHEMA.names], schema=SHARD_SCHEMA, preserve_index=False)
        meta = {
            **(table.schema.metadata or {}),
            SHARD_KEY_META: self.key.encode(),
            SHARD_INDEX_META: b"%d" % index,
        }
        table = table.replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        return sink.getvalue().to_pybytes()

    def write_shard(self, index: int, frame: pd.DataFrame, producer: str | None = None) -> None:
        """Store shard `index` (rows of SHARD_SCHEMA) atomically, then its checksum (which records
        the `producer`, e.g. host:pid, for the manifest). Hold lock()."""
        if len(frame) > max_shard_rows(self.spec):
            raise ValueError(
                f"shard {index} has {len(frame)} rows, more than one shard holds under the entry's spec "
                f"({max_shard_rows(self.spec)})"
            )
        data = self.encode_shard(index, frame)
        shard = self.shard_path(index)
        checksum = self._checksum_path(shard)
        self._check_folders()
        try:
            # Drop the old checksum first: a shard being replaced must never verify against it.
            checksum.unlink(missing_ok=True)
        except OSError as err:
            raise location_error(err, shard) from err
        atomic_write(shard, data)
        record = {"sha256": _sha256(data), "rows": len(frame), "bytes": len(data)}
        atomic_write(checksum, _dump(record | ({"producer": producer} if producer else {})))

    def _checksum_file(self, index: int) -> tuple[dict | None, str | None]:
        """(record, None) of shard `index`'s .sha256 file, or (None, why it has no usable one)."""
        name = shard_name(index) + ".sha256"
        try:
            record = json.loads(self.read_file(name, MAX_RECORD_BYTES))
        except FileNotFoundError:
            return None, f"shard {index} has no checksum file"
        except UnsafeFileError as err:
            return None, str(err)
        except (OSError, ValueError) as err:
            return None, f"{name} is unreadable ({err})"
        problem = _record_problem(record, self.spec)
        if problem is not None:
            return None, f"{name} {problem}"
        return record, None

    def _shard_bytes(self, index: int, record: dict) -> tuple[bytes | None, str | None]:
        """(bytes, None) of shard `index` when they are exactly what `record` (a checked record)
        says; otherwise (bytes or None, why not): the bytes come back only if they were read."""
        try:
            data = self.read_file(shard_name(index), record["bytes"])
        except FileNotFoundError:
            return None, f"shard {index} is missing or unreadable"
        except UnsafeFileError as err:
            if err.errno == errno.EFBIG:
                return None, f"shard {index} is larger than its record says ({record['bytes']} bytes)"
            return None, str(err)
        except OSError as err:
            return None, f"shard {index} is missing or unreadable ({err.strerror or err})"
        if len(data) != record["bytes"]:
            return data, f"shard {index} has {len(data)} bytes but its record says {record['bytes']}"
        if _sha256(data) != record["sha256"]:
            return data, f"shard {index} failed its checksum"
        return data, None

    def _shard_record(self, shard: Path) -> dict | None:
        """The checksum record of a shard, if it has a valid one and the shard matches it."""
        index = shard_index(shard.name)
        if index is None:
            return None
        record, problem = self._checksum_file(index)
        if problem is not None:
            return None
        data, problem = self._shard_bytes(index, record)
        if problem is not None:
            return None
        return {**record, "_data": data}

    def _identity_problem(self, index: int, data: bytes, *, legacy_ok: bool) -> str | None:
        """Why these shard bytes are not shard `index` of this entry (parquet metadata), or None."""
        try:
            metadata = pq.read_schema(pa.BufferReader(data)).metadata or {}
        except (pa.ArrowException, OSError, ValueError) as err:
            return f"shard {index} is not a readable parquet file ({err})"
        key, written_index = metadata.get(SHARD_KEY_META), metadata.get(SHARD_INDEX_META)
        if key is None and written_index is None:
            return None if legacy_ok else f"shard {index} does not record which entry it belongs to"
        key_text = (key or b"").decode(errors="replace")
        if key_text != self.key:
            return f"shard {index} belongs to another entry ({key_text[:12] or 'unknown'}), not to this one"
        if written_index != b"%d" % index:
            return f"shard file {index} holds shard {(written_index or b'?').decode(errors='replace')}"
        return None

    def has_shard(self, index: int) -> bool:
        """Whether shard `index` exists and matches its checksum (reads and hashes that shard only)."""
        return self._shard_record(self.shard_path(index)) is not None

    def recorded_rows(self, index: int) -> int:
        """Rows that shard `index`'s checksum record claims (0 when it has none). Cheap and
        unverified: for progress displays only, never for data."""
        record, _ = self._checksum_file(index)
        return 0 if record is None else int(record["rows"])

    @contextlib.contextmanager
    def shard_claim(self, index: int, wait: bool) -> Iterator[bool]:
        """Hold the claim on computing shard `index` (one lock file per shard, so workers of one
        entry never compute the same shard); yields False when another process holds it and
        `wait` is false. Claims are released when their process dies (flock)."""
        path = self.root / "locks" / f"{self.key}.shard-{index:05d}.lock"
        try:
            ensure_real_dir(path.parent, "the locks folder")
        except UnsafeFileError as err:
            raise CacheError(f"cache entry {self.key[:12]}: {err}; refusing to write through it") from None
        except OSError as err:
            raise location_error(err, path) from err
        problem = entry_file_problem(path)
        if problem is not None:
            raise CacheError(f"cache entry {self.key[:12]}: its shard lock {problem}; remove {path}")
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def completed_shards(self) -> set[int]:
        """Indices of shards whose checksum verifies and whose metadata names this entry and index.
        Other shards are removed with a warning (an unchecksummed one only by the lock holder)."""
        done: set[int] = set()
        if entry_dir_problem(self.path) is not None or not self.path.is_dir():
            return done
        for shard in sorted(self.path.iterdir()):
            index = shard_index(shard.name)
            if index is None or (shard.is_dir() and not shard.is_symlink()):
                continue
            has_checksum = os.path.lexists(self._checksum_path(shard))
            record, problem = self._checksum_file(index)
            if record is not None:
                data, problem = self._shard_bytes(index, record)
                if problem is None:
                    problem = self._identity_problem(index, data, legacy_ok=False)
                if problem is None:
                    done.add(index)
                    continue
            if has_checksum:
                reason = problem or f"shard {index} failed its checksum"
                warnings.warn(
                    f"cache entry {self.key[:12]}: {reason}; it was removed and will be recomputed",
                    stacklevel=2,
                )
                self._discard_shard(index)
            elif self.locked:
                # Renamed into place but the writer died before its checksum: unverifiable.
                self._discard_shard(index)
        if self.locked:
            for checksum in self.path.glob("shard-*.parquet.sha256"):
                if is_cache_file(checksum.name) and not os.path.lexists(checksum.with_suffix("")):
                    checksum.unlink(missing_ok=True)  # checksum of a shard that is gone
        return done

    def remove_shard(self, index: int) -> None:
        """Delete shard `index`, its checksum and the manifest (the entry becomes incomplete): for
        shards found wrong by checks made outside the store (counts derived from the corpus).
        Only the lock holder may delete shards: CacheError otherwise."""
        if not self.locked:
            raise CacheError(f"cache entry {self.key[:12]}: removing shard {index} needs the entry's lock")
        self._discard_shard(index)

    def _discard_shard(self, index: int) -> None:
        """Delete shard `index`, its checksum and the manifest: names derived here, never read."""
        shard = self.shard_path(index)
        for path in (self._checksum_path(shard), shard, self.manifest_path):
            with contextlib.suppress(OSError):
                path.unlink()

    def finalize(self, manifest: dict, n_shards: int | None = None) -> dict:
        """Mark the entry complete: verify shards 0..n-1, then write manifest.json last, atomically.

        `n_shards`, when the caller knows it (the extractor planned the shards), is how many there
        must be: a shard that vanished or failed meanwhile then stops the finalization instead of
        making a shorter entry.

        `manifest` is the extractor's metadata (model info, corpus, settings, vocab_size);
        the cache adds key, spec, shard list with checksums, n_tokens, created and versions.
        Returns the manifest as written.
        """
        self._check_folders()
        done = sorted(self.completed_shards())
        if not done:
            raise CacheError(f"cannot finalize cache entry {self.key[:12]}: it has no shards")
        wanted = n_shards if n_shards is not None else done[-1] + 1
        if done != list(range(wanted)):
            missing = sorted(set(range(wanted)) - set(done))
            extra = sorted(set(done) - set(range(wanted)))
            raise CacheError(
                f"cannot finalize cache entry {self.key[:12]}: shards {missing} are missing"
                + (f" and shards {extra} are beyond the {wanted} planned" if extra else "")
            )
        shards, tables = [], []
        for index in done:
            shard = self.shard_path(index)
            record = self._shard_record(shard)
            if record is None:
                raise CacheError(f"cache entry {self.key[:12]}: shard {index} changed while finalizing")
            tables.append(_token_table(record.pop("_data")))
            shards.append({"index": index, "file": shard.name, **record})
        # The summary is derived here, by whoever completes the entry (a Ray worker, a SLURM task),
        # from the shards just verified; the manifest records its checksum.
        summary_record = self._write_summary(self._stats_of(pa.concat_tables(tables), manifest))
        del tables
        producers = sorted({s["producer"] for s in shards if s.get("producer")})
        provenance = {**_versions(), **manifest.get("provenance", {}), "producers": producers}
        full = {
            **manifest,
            "key": self.key,
            "spec": self.spec,
            "rank_format_version": RANK_FORMAT_VERSION,
            "n_tokens": sum(s["rows"] for s in shards),
            "shards": shards,
            "summary": summary_record,
            "created": manifest.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "provenance": provenance,
        }
        atomic_write(self.manifest_path, _dump(full))
        return full

    # -- reading ---------------------------------------------------------------------------
    def is_complete(self) -> bool:
        """Whether the entry has a manifest.json (of any kind: one that is not a regular file makes
        a damaged entry, never an incomplete one that a resume would trip over)."""
        return entry_dir_problem(self.path) is None and os.path.lexists(self.manifest_path)

    def _load_manifest(self) -> Any:
        """The parsed manifest.json; FileNotFoundError, UnsafeFileError, OSError or ValueError."""
        return json.loads(self.read_file("manifest.json", max_manifest_bytes(self.spec)))

    def _raw_manifest(self) -> dict:
        problem = entry_dir_problem(self.path)
        if problem is not None:
            raise CacheCorruptedError(
                f"cache entry {self.key[:12]} at {self.path} cannot be read: {problem}; remove the link "
                f"(rbplab cache rm {self.key[:12]})"
            )
        try:
            manifest = self._load_manifest()
        except FileNotFoundError:
            raise CacheError(
                f"cache entry {self.key[:12]} at {self.path} is not complete; run the extraction "
                "(rbplab extract) to finish it"
            ) from None
        except UnsafeFileError as err:
            raise self._corrupted(str(err)) from None
        except ValueError as err:
            raise self._corrupted(f"its manifest is unreadable ({err})") from err
        except OSError as err:
            raise CacheError(
                f"cache entry {self.key[:12]}: cannot read {self.manifest_path} ({err})"
            ) from err
        return manifest

    def manifest(self) -> dict:
        """The manifest of a complete entry, after every check that needs no shard bytes
        (`manifest_problems`); a violation raises CacheCorruptedError and marks the entry incomplete."""
        manifest = self._raw_manifest()
        problems = self.manifest_problems(manifest)
        if problems:
            raise self._corrupted(problems[0])
        return manifest

    def manifest_problems(self, manifest: Any) -> list[str]:
        """Every rule of the module docstring that `manifest` breaks, short of reading shard bytes."""
        problems = []
        spec_problem = self._spec_problem()
        if spec_problem:
            problems.append(spec_problem)
        if not isinstance(manifest, dict):
            return [*problems, "manifest.json is not a JSON object"]
        if "key" not in manifest:
            problems.append("the manifest records no key (an empty or foreign manifest.json)")
        elif manifest.get("key") != self.key:
            problems.append(
                f"the manifest's key {str(manifest.get('key'))[:12]!r} is not the entry's key "
                "(manifest copied from another entry?)"
            )
        elif not isinstance(manifest.get("spec"), dict) or canonical_json(manifest["spec"]) != canonical_json(
            self.spec
        ):
            problems.append("the manifest's spec differs from the entry's spec")
        if manifest.get("rank_format_version", RANK_FORMAT_VERSION) != RANK_FORMAT_VERSION:
            problems.append(
                f"rank_format_version {manifest.get('rank_format_version')!r} is not {RANK_FORMAT_VERSION}"
            )
        shards = manifest.get("shards")
        records_ok = isinstance(shards, list) and bool(shards) and all(isinstance(r, dict) for r in shards)
        if not records_ok:
            problems.append("the manifest has no list of shard records")
            shards = []
        indices = [r.get("index") for r in shards]
        if records_ok and indices != list(range(len(shards))):
            problems.append(
                f"shard records are not exactly 0..{len(shards) - 1} in order (indices {indices})"
            )
        for position, record in enumerate(shards):
            index = record.get("index")
            label = index if isinstance(index, int) and not isinstance(index, bool) else position
            if record.get("file") != shard_name(label):
                problems.append(
                    f"shard record {label} names file {record.get('file')!r}; only {shard_name(label)!r} "
                    "is allowed"
                )
            record_problem = _record_problem(record, self.spec)
            if record_problem is not None:
                problems.append(f"shard record {label} {record_problem}")
        row_counts = [r.get("rows") for r in shards]
        if records_ok and all(isinstance(n, int) and not isinstance(n, bool) for n in row_counts):
            total = sum(row_counts)
            if manifest.get("n_tokens") != total:
                problems.append(
                    f"n_tokens {manifest.get('n_tokens')!r} is not the sum of the shard rows ({total})"
                )
            problems += self._count_problems(row_counts)
        if entry_dir_problem(self.path) is None and self.path.is_dir():
            extra = sorted(
                int(m.group(1))
                for m in (_SHARD_RE.match(p.name) for p in self.path.iterdir())
                if m and int(m.group(1)) >= len(shards)
            )
            if extra:
                problems.append(
                    f"shard files {extra} exist beyond the {len(shards)} shards the manifest lists"
                )
        for manifest_path, spec_path in MIRRORED.items():
            expected = _lookup(self.spec, spec_path)
            if expected is _MISSING:
                continue
            found = _lookup(manifest, manifest_path)
            if found is _MISSING:
                if manifest_path == ("vocab_size",):
                    problems.append("the manifest records no vocab_size")
                continue
            if canonical_json(found) != canonical_json(expected):
                problems.append(
                    f"manifest {'.'.join(manifest_path)} is {found!r} but the spec says {expected!r}"
                )
        return problems

    def _count_problems(self, row_counts: list[int]) -> list[str]:
        """What the spec alone says about the shard sizes: every shard but the last holds at least
        shard_tokens targets, and the entry no more than max_tokens. (How many there must be
        follows from the corpus: `rbplab.extraction.pipeline.count_problems`.)"""
        problems = []
        shard_tokens = _count_at(self.spec, ("windows", "shard_tokens"))
        if shard_tokens:
            short = [i for i, rows in enumerate(row_counts[:-1]) if rows < shard_tokens]
            if short:
                problems.append(
                    f"shard records {short} hold fewer than the {shard_tokens} rows every shard but the "
                    "last holds under the spec"
                )
        budget = _count_at(self.spec, ("max_tokens",))
        if budget and sum(row_counts) > budget:
            problems.append(f"the shards hold {sum(row_counts)} rows, more than max_tokens ({budget})")
        return problems

    def damaged(self, what: str) -> CacheCorruptedError:
        """Mark the entry incomplete (drop the manifest, when the cache is writable) and return the
        error describing `what` is wrong: for checks made outside the store (derived counts)."""
        return self._corrupted(what)

    def _corrupted(self, what: str) -> CacheCorruptedError:
        """Mark the entry incomplete (drop the manifest) and describe what was wrong."""
        try:
            self.manifest_path.unlink(missing_ok=True)
        except OSError as err:  # a read-only cache: the entry stays as it is, and the message says so
            return CacheCorruptedError(
                f"cache entry {self.key[:12]} at {self.path} is damaged: {what}. It cannot be marked "
                f"incomplete here ({err.strerror or err}); re-run the same extraction (or rbplab cache "
                f"repair {self.key[:12]}) where the cache is writable"
            )
        return CacheCorruptedError(
            f"cache entry {self.key[:12]} at {self.path} is damaged: {what}. It has been marked "
            f"incomplete; re-run the same extraction (or rbplab cache repair {self.key[:12]}) "
            "to recompute the damaged part"
        )

    def _shard_problem(self, record: dict) -> tuple[str | None, bytes | None]:
        """Read the shard a (checked) manifest record stands for; (problem, bytes). The bytes come
        back whenever they were read, so a caller can discard a shard that failed."""
        index = record["index"]
        data, problem = self._shard_bytes(index, record)
        if problem is None:
            problem = self._identity_problem(index, data, legacy_ok=True)
        if problem is None:
            try:
                rows = pq.read_metadata(pa.BufferReader(data)).num_rows
            except (pa.ArrowException, OSError, ValueError) as err:
                return f"shard {index} is not a readable parquet file ({err})", data
            if rows != record["rows"]:
                problem = f"shard {index} has {rows} rows but its record says {record['rows']}"
        if problem is None:  # both records of the shard must agree: a garbage .sha256 is damage too
            checksum, problem = self._checksum_file(index)
            if problem is None and any(checksum[f] != record.get(f) for f in ("sha256", "rows", "bytes")):
                problem = f"{shard_name(index)}.sha256 disagrees with the manifest's record of shard {index}"
            if problem is not None:
                return problem, None  # the shard itself is sound: keep it
        return problem, data

    def _verified_shards(self) -> Iterator[bytes]:
        """Bytes of each shard of a complete entry, after every check of the module docstring."""
        for record in self.manifest()["shards"]:
            problem, data = self._shard_problem(record)
            if problem is not None:
                warnings.warn(f"cache entry {self.key[:12]} is corrupted: {problem}", stacklevel=4)
                if data is not None:
                    self._discard_shard(record["index"])
                raise self._corrupted(problem + ("" if data is None else "; the shard was removed"))
            yield data

    def problems(self, summary: bool = True) -> list[str]:
        """Everything wrong with this entry, complete or not, one line each; deletes nothing and
        follows no link (a linked entry or prefix folder is reported, never read through)."""
        folder = entry_dir_problem(self.path)
        if folder is not None:
            return [folder]
        if not self.path.is_dir():
            return [f"{self.path} does not exist"]
        problems = self.odd_items()
        if self.is_complete():
            try:
                manifest = self._load_manifest()
            except UnsafeFileError as err:
                return problems if str(err) in problems else [*problems, str(err)]
            except (OSError, ValueError) as err:
                return [*problems, f"its manifest is unreadable ({err})"]
            manifest_problems = self.manifest_problems(manifest)
            if manifest_problems:
                return problems + manifest_problems
            for record in manifest["shards"]:
                problem, _ = self._shard_problem(record)
                if problem is not None and problem not in problems:
                    problems.append(problem)
            if summary and not problems:
                problems += self.summary_problems(manifest)
            return problems
        spec_problem = self._spec_problem()
        if spec_problem and spec_problem not in problems:
            problems.append(spec_problem)
        for shard in sorted(self.path.iterdir()):
            index = shard_index(shard.name)
            if index is None or entry_file_problem(shard) is not None:
                continue  # odd items are reported above
            if not os.path.lexists(self._checksum_path(shard)):
                problems.append(f"shard {index} has no checksum file (an interrupted write)")
                continue
            record, problem = self._checksum_file(index)
            if problem is None:
                data, problem = self._shard_bytes(index, record)
                if problem is None:
                    problem = self._identity_problem(index, data, legacy_ok=False)
            if problem is not None and problem not in problems:
                problems.append(problem)
        return problems

    def verify(self) -> None:
        """Check every shard of a complete entry; raises CacheCorruptedError (entry marked incomplete)."""
        for _ in self._verified_shards():
            pass

    def read_shard(self, index: int, *, mark_damaged: bool = True) -> bytes:
        """The bytes of shard `index` of a complete entry, after every check of its record, its
        .sha256 file, its checksum and its metadata; CacheCorruptedError otherwise, which marks the
        entry incomplete unless `mark_damaged` is false (`rbplab cache verify` deletes nothing)."""
        manifest = self._raw_manifest()
        problems = self.manifest_problems(manifest)
        if not problems:
            records = manifest["shards"]
            if not 0 <= index < len(records):
                raise CacheError(f"cache entry {self.key[:12]} has shards 0..{len(records) - 1}, not {index}")
            problem, data = self._shard_problem(records[index])
            if problem is None:
                return data
            problems = [problem]
        if mark_damaged:
            raise self._corrupted(problems[0])
        raise CacheCorruptedError(f"cache entry {self.key[:12]} at {self.path} is damaged: {problems[0]}")

    def verified_files(self) -> Iterator[tuple[str, bytes]]:
        """(name, bytes) of every file of a complete entry in the order an archive holds them
        (spec.json, each shard and its .sha256, manifest.json last), each read once and checked:
        the bytes handed out are the bytes verified. CacheCorruptedError on any problem."""
        manifest_bytes = self.read_file("manifest.json", max_manifest_bytes(self.spec))
        manifest = self.manifest()
        yield "spec.json", self.read_file("spec.json", MAX_SPEC_BYTES)
        for record in manifest["shards"]:
            index = record["index"]
            problem, data = self._shard_problem(record)
            if problem is not None:
                raise self._corrupted(problem)
            yield shard_name(index), data
            checksum = shard_name(index) + ".sha256"
            yield checksum, self.read_file(checksum, MAX_RECORD_BYTES)
        yield from self._verified_summary_files(manifest)
        if json.loads(manifest_bytes) != manifest:
            raise self._corrupted("manifest.json changed while being read")
        yield "manifest.json", manifest_bytes

    def _verified_summary_files(self, manifest: dict) -> Iterator[tuple[str, bytes]]:
        """The summary and its record when both pass every check; nothing otherwise (a summary is
        derived data: whoever reads the entry without one derives it again)."""
        if not os.path.lexists(self.summary_path) or self._summary_problem(manifest, full=True)[0]:
            return
        data = self.read_file(SUMMARY_FILE, max_summary_bytes(int(manifest["n_tokens"])))
        record = self.read_file(SUMMARY_FILE + ".sha256", MAX_RECORD_BYTES)
        if json.loads(record).get("sha256") == _sha256(data):  # the bytes checked are the bytes shared
            yield SUMMARY_FILE, data
            yield SUMMARY_FILE + ".sha256", record

    def _read_tables(self, columns: list[str] | None) -> pa.Table:
        tables = []
        for data in self._verified_shards():
            table = pq.read_table(pa.BufferReader(data), columns=columns)
            own = {k: v for k, v in (table.schema.metadata or {}).items() if not k.startswith(b"rbplab.")}
            tables.append(table.replace_schema_metadata(own))
        if not tables:
            return SHARD_SCHEMA.empty_table().select(columns or SHARD_SCHEMA.names)
        return pa.concat_tables(tables)

    def read_stats(self) -> TokenStats:
        """The TokenStats of a complete entry, after every store check.

        Not checked: how many shards and tokens the entry must hold, which follows from its corpus
        and tokenizer. An entry missing its last shard, with its records and n_tokens made to
        match, reads here as the shorter entry; `rbplab.extraction.load_stats` and `extract`
        derive the counts (and repair such an entry), `rbplab cache verify` reports it."""
        return self._stats_of(self._read_tables(list(_TOKEN_COLUMNS)))

    def _vocab_size(self, manifest: dict | None = None) -> int:
        vocab = _lookup(self.spec, ("vocab", "size"))
        return int(vocab) if vocab is not _MISSING else ranked_vocab_size(manifest or self.manifest())

    def _stats_of(self, table: pa.Table, manifest: dict | None = None) -> TokenStats:
        frame = table.select(list(_TOKEN_COLUMNS)).to_pandas()
        return TokenStats.from_frame(frame, self._vocab_size(manifest), doc_column="doc_index")

    # -- the summary ---------------------------------------------------------------------------
    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY_FILE

    def _write_summary(self, stats: TokenStats) -> dict:
        """Write the summary of `stats`, then its record; returns the record."""
        data = summary_bytes(summarize(stats), self.key)
        record = {"sha256": _sha256(data), "bytes": len(data), "version": SUMMARY_VERSION}
        checksum = self._checksum_path(self.summary_path)
        checksum.unlink(missing_ok=True)  # a summary being replaced must never verify against it
        atomic_write(self.summary_path, data)
        atomic_write(checksum, _dump(record))
        return record

    def _summary_problem(self, manifest: dict, full: bool = False) -> tuple[str | None, EntrySummary | None]:
        """(None, summary) when the summary file passes every check; (reason, None) otherwise;
        (None, None) when there is none. The per-document tables are checked when an analysis
        reads them, or here with `full` (`cache verify`)."""
        path, checksum = self.summary_path, self._checksum_path(self.summary_path)
        if not os.path.lexists(path):
            return None, None
        limit = max_summary_bytes(int(manifest["n_tokens"]))
        try:
            data = read_entry_file(path, self.path, limit)
            record = json.loads(read_entry_file(checksum, self.path, 4096))
        except (OSError, ValueError) as err:
            return f"its summary cannot be read ({err})", None
        if not isinstance(record, dict) or record.get("sha256") != _sha256(data):
            return "its summary failed its checksum", None
        listed = manifest.get("summary")
        if isinstance(listed, dict) and listed.get("sha256") != record["sha256"]:
            return "its summary is not the one the manifest records", None
        try:
            summary = parse_summary(
                data,
                self.key,
                self._vocab_size(manifest),
                int(manifest["n_tokens"]),
                load_tokens=self.read_stats,
                reload=lambda: read_entry_file(path, self.path, limit),
            )
            if full:
                summary.load_documents()
        except (SummaryError, OSError) as err:
            return f"its summary is refused: {err}", None
        return None, summary

    def has_summary(self) -> bool:
        """Whether a summary file is present (checked only when read)."""
        return os.path.lexists(self.summary_path)

    def summary_problems(self, manifest: dict | None = None) -> list[str]:
        """What is wrong with the summary of a complete entry (every table checked), one line."""
        problem, _ = self._summary_problem(manifest or self.manifest(), full=True)
        return [] if problem is None else [problem]

    def summary(self, manifest: dict | None = None) -> EntrySummary:
        """The entry's summary, every check passed; tokens are read only through its
        `token_stats()`. A missing summary (an entry cached before summaries existed) or one that
        fails a check is derived again from the verified shards, once, and stored; in a read-only
        cache it is kept in memory, with a one-line notice. `manifest`: the one `manifest()` just
        returned, so a caller that needs it too does not read and check it twice.

        Not checked: how many tokens the entry must hold (that follows from its corpus and
        tokenizer). A stored summary must hold the manifest's n_tokens, so an entry truncated
        with its summary left in place is refused; one truncated with its summary removed too
        gets a summary derived from the shards it has. `extract` and `rbplab cache verify` derive
        the counts; `rbplab.study.load_study` derives them for an entry without a summary."""
        manifest = self.manifest() if manifest is None else manifest
        problem, summary = self._summary_problem(manifest)
        if summary is not None:
            return summary
        if problem is not None:
            warnings.warn(
                f"cache entry {self.key[:12]}: {problem}; deriving it again from the shards", stacklevel=2
            )
        stats = self.read_stats()
        derived = summarize(stats).complete()
        try:
            check_writable(self.root)
            with self.lock():
                record = self._write_summary(stats)
                if manifest.get("summary") != record:  # the derived summary is the truth: record it
                    atomic_write(self.manifest_path, _dump({**manifest, "summary": record}))
        except (OSError, Timeout) as err:
            warnings.warn(
                f"cache entry {self.key[:12]}: summary derived in memory, not stored ({err})", stacklevel=2
            )
        return dataclasses.replace(derived, stats=None, load_tokens=self.read_stats)


_MISSING = object()
_TOKEN_COLUMNS = ("doc_index", "position", "n_greater", "n_equal", "nll")


def _token_table(data: bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data), columns=list(_TOKEN_COLUMNS))


def _lookup(data: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def ranked_vocab_size(manifest: dict) -> int:
    """|V| the ranks were taken over: manifest["vocab_size"], else derived from the model info
    (head_rows when the padded vocabulary was included, the tokenizer's vocab_size otherwise)."""
    if manifest.get("vocab_size"):
        return int(manifest["vocab_size"])
    model = manifest.get("model") or {}
    settings = {**manifest.get("spec", {}), **manifest.get("settings", {})}
    if settings.get("include_padded_vocab") and model.get("head_rows"):
        return int(model["head_rows"])
    if model.get("vocab_size"):
        return int(model["vocab_size"])
    raise CacheError("cache manifest records no vocab_size; the entry was written by an incompatible version")


def _dump(obj: dict) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# Locating, listing and removing entries


def entry_dirs(root: Path) -> list[Path]:
    """Every entry directory (``<root>/<key[:2]>/<key>``), whatever its state: symbolic links to
    folders included, so that `verify` reports them (nothing is read through them)."""
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.glob("??/*") if p.is_dir() and _KEY_RE.match(p.name) and p.parent.name == p.name[:2]
    )


def _matching_dirs(root: Path, prefix: str) -> list[Path]:
    prefix = prefix.lower()
    return [p for p in entry_dirs(root) if p.name.startswith(prefix)]


def _read_spec(path: Path) -> dict | None:
    """The spec of the entry directory `path`: the one of spec.json (or, failing that, of the
    manifest) that hashes to the directory name; None if neither does (or the folder is a link)."""
    for name, limit in (("spec.json", MAX_SPEC_BYTES), ("manifest.json", max_manifest_bytes(None))):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(read_entry_file(path / name, path, limit))
            spec = data["spec"] if name == "manifest.json" else data
            if isinstance(spec, dict) and cache_key(spec) == path.name:
                return spec
    return None


def entry_at(path: Path, root: Path | None = None) -> CacheEntry | None:
    """The CacheEntry of an entry directory, None when no spec on disk hashes to its name."""
    spec = _read_spec(path)
    return None if spec is None else CacheEntry(root if root is not None else path.parent.parent, spec)


def entry_dir_problems(path: Path, root: Path | None = None, summary: bool = True) -> list[str]:
    """Everything wrong with the entry directory `path`, one line each (what `rbplab cache verify`
    prints): a linked entry or prefix folder, no spec.json hashing to its name, then
    `CacheEntry.problems` (without the summary's with summary=False). Deletes nothing, follows no
    link."""
    folder = entry_dir_problem(path)
    if folder is not None:
        return [folder]
    entry = entry_at(path, root)
    if entry is None:
        odd = [p for p in (entry_file_problem(path / n) for n in ("spec.json", "manifest.json")) if p]
        return [*odd, "no spec.json that hashes to the directory name"]
    return entry.problems(summary=summary)


def _label(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("name", "name_or_path", "id", "path"):
            if value.get(key):
                return str(value[key])
        return json.dumps(value, sort_keys=True)
    return None if value is None else str(value)


def _shard_files_problem(entry: CacheEntry, shards: list[dict]) -> str | None:
    """The first shard of a checked manifest whose file is missing, not a regular file or not the
    size its record says, or whose .sha256 record disagrees: no shard bytes read (for listings)."""
    for record in shards:
        index = record["index"]
        shard = entry.shard_path(index)
        try:
            info = os.lstat(shard)
        except OSError:
            return f"shard {index} is missing or unreadable"
        if not stat.S_ISREG(info.st_mode):
            return f"{shard.name} is {file_kind(info.st_mode)}, not a regular file"
        if info.st_size != record["bytes"]:
            return f"shard {index} has {info.st_size} bytes but its record says {record['bytes']}"
        checksum, problem = entry._checksum_file(index)
        if problem is None and any(checksum[f] != record.get(f) for f in ("sha256", "rows", "bytes")):
            problem = f"{shard.name}.sha256 disagrees with the manifest's record of shard {index}"
        if problem is not None:
            return problem
    return None


def entry_status(path: Path) -> tuple[str, int | None, str | None]:
    """(status, n_tokens, problem) of an entry directory without reading shard bytes: status is
    "complete", "incomplete" or "damaged"; n_tokens is derived (rows of the checked shard
    records, or of the shards done so far) and None for a damaged entry."""
    folder = entry_dir_problem(path)
    if folder is not None:
        return "damaged", None, folder
    entry = entry_at(path)
    if entry is None:
        return "damaged", None, "no spec.json that hashes to the directory name"
    if entry.is_complete():
        try:
            manifest = entry._load_manifest()
        except UnsafeFileError as err:
            return "damaged", None, str(err)
        except (OSError, ValueError) as err:
            return "damaged", None, f"its manifest is unreadable ({err})"
        problems = entry.manifest_problems(manifest)
        problem = problems[0] if problems else _shard_files_problem(entry, manifest["shards"])
        if problem is not None:
            return "damaged", None, problem
        return "complete", int(manifest["n_tokens"]), None
    n_tokens = 0
    for checksum in path.glob("shard-*.parquet.sha256"):
        index = shard_index(checksum.name[: -len(".sha256")])
        if index is not None:
            record, _ = entry._checksum_file(index)
            n_tokens += 0 if record is None else int(record["rows"])
    return "incomplete", n_tokens, None


def list_entries(root: str | Path | None = None) -> pd.DataFrame:
    """One row per cache entry: key, model, revision (None for a model's final weights), step (the
    checkpoint's training step when its manifest records one), corpus, max_tokens and
    context_length (the settings it was scored with; None: no cap, the model's maximum), n_tokens
    (so far, for incomplete entries; none for damaged ones), complete, status ("complete",
    "incomplete", "damaged"), size_bytes, created (UTC), path. Oldest first. A damaged entry never
    stops the listing."""
    rows = []
    for path in entry_dirs(cache_root(root)):
        status, n_tokens, _ = entry_status(path)
        spec = _read_spec(path) or {}
        created, step = None, None
        if status == "complete":  # a complete entry's manifest passed manifest_problems just now
            with contextlib.suppress(OSError, ValueError, AttributeError):
                raw = read_entry_file(path / "manifest.json", path, max_manifest_bytes(spec))
                manifest = json.loads(raw)
                created = manifest.get("created")
                step = (manifest.get("training") or {}).get("step")
        model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
        windows = spec.get("windows") if isinstance(spec.get("windows"), dict) else {}
        try:
            created_at = pd.Timestamp(created) if isinstance(created, str) else None
        except ValueError:
            created_at = None
        size = 0
        if entry_dir_problem(path) is None:
            for item in path.iterdir():
                with contextlib.suppress(OSError):
                    info = os.lstat(item)
                    size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        rows.append(
            {
                "key": path.name,
                "model": _label(spec.get("model")),
                "revision": model.get("revision"),
                "step": step if isinstance(step, int) else None,
                "corpus": _label(spec.get("corpus")),
                "max_tokens": spec.get("max_tokens"),
                "context_length": windows.get("context_length"),
                "n_tokens": n_tokens,
                "complete": status == "complete",
                "status": status,
                "size_bytes": size,
                "created": created_at
                if created_at is not None
                else pd.Timestamp(os.lstat(path).st_mtime, unit="s"),
                "path": str(path),
            }
        )
    table = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
    for column in ("step", "max_tokens", "context_length", "n_tokens"):
        table[column] = table[column].astype("Int64")
    table["complete"] = table["complete"].astype(bool)
    table["size_bytes"] = table["size_bytes"].astype("int64")
    table["created"] = pd.to_datetime(table["created"], utc=True)
    return table.sort_values("created", kind="stable").reset_index(drop=True)


def foreign_items(path: Path) -> list[str]:
    """Names in the entry directory `path` that removal would not delete: names the cache does not
    write, and folders under cache names that are not empty."""
    foreign = []
    for item in path.iterdir():
        if not is_cache_file(item.name):
            foreign.append(item.name)
        elif item.is_dir() and not item.is_symlink() and any(item.iterdir()):
            foreign.append(item.name)
    return sorted(foreign)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_entry_dir(path: Path) -> None:
    """Delete an entry directory file by file: only names the cache generates (`is_cache_file`),
    then the directory itself. Anything else stays, and the entry is then reported, not removed.

    manifest.json goes first (made durable before anything else is deleted) and spec.json last, so
    a removal interrupted half way leaves an incomplete entry that names its spec, never one that
    reads as complete. An entry folder that is a symbolic link is removed as a link (its target is
    never touched); an entry under a linked prefix folder is refused."""
    folder = entry_dir_problem(path)
    if folder is not None:
        if os.path.islink(path) and not os.path.islink(path.parent):
            path.unlink()  # an entry folder that is a link: the link goes, its target is never touched
            return
        culprit = path.parent if os.path.islink(path.parent) else path
        raise CacheError(f"cache entry {path.name[:12]}: {folder}; not removed (remove {culprit} by hand)")
    foreign = foreign_items(path)
    if foreign:
        raise CacheError(
            f"cache entry {path.name[:12]} holds files the cache did not write ({', '.join(foreign)}); "
            f"nothing was removed: move those away first or remove {path} by hand"
        )
    manifest = path / "manifest.json"
    if os.path.lexists(manifest):
        _remove_item(manifest)
        _fsync_dir(path)
    items = sorted(path.iterdir(), key=lambda item: item.name == "spec.json")  # spec.json last
    for item in items:
        _remove_item(item)
    path.rmdir()


def _remove_item(item: Path) -> None:
    if item.is_dir() and not item.is_symlink():
        item.rmdir()  # an empty folder under a cache name (foreign_items refused any other)
    else:
        item.unlink()  # a symbolic link is removed itself; its target is never touched


def remove_entries(
    prefixes: str | Iterable[str] = (),
    *,
    root: str | Path | None = None,
    incomplete: bool = False,
    all_matching: bool = False,
    everything: bool = False,
) -> list[str]:
    """Delete entries whose key starts with any of `prefixes` (and, with `incomplete`, every
    incomplete entry; with `everything`, every entry). A prefix must be at least MIN_PREFIX hex
    characters, and one matching several entries is refused unless `all_matching`. Entries being
    written are refused. Returns removed keys."""
    root = cache_root(root)
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    targets: dict[str, Path] = {}
    for prefix in prefixes:
        text = prefix.strip().lower()
        if len(text) < MIN_PREFIX or not _HEX_RE.match(text):
            raise CacheError(
                f"refusing key prefix {prefix!r}: give at least {MIN_PREFIX} hex characters of a key "
                "(rbplab cache ls shows them); --all removes every entry"
            )
        matches = _matching_dirs(root, text)
        if not matches:
            raise CacheError(f"no cache entry matches key prefix {prefix!r} under {root}")
        if len(matches) > 1 and not all_matching:
            raise CacheError(
                f"key prefix {prefix!r} matches {len(matches)} cache entries; give more characters "
                "or pass --all-matching"
            )
        targets.update((p.name, p) for p in matches)
    if incomplete:
        targets.update(
            (p.name, p)
            for p in entry_dirs(root)
            if entry_dir_problem(p) is None and not os.path.lexists(p / "manifest.json")
        )
    if everything:
        targets.update((p.name, p) for p in entry_dirs(root))
    removed = []
    for key, path in sorted(targets.items()):
        lock = FileLock(str(root / "locks" / f"{key}.lock"), timeout=0)
        try:
            ensure_real_dir(root / "locks", "the locks folder")
            with lock:
                remove_entry_dir(path)
        except Timeout as err:
            raise CacheError(
                f"cache entry {key[:12]} is being written by another process; not removed"
            ) from err
        except OSError as err:
            raise location_error(err, path) from err
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the <key[:2]> folder, when now empty
        removed.append(key)
    return removed
