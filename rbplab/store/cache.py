"""Content-addressed cache of per-token rank statistics.

An entry is keyed by the sha256 of everything that changes the numbers (the spec
dict the extractor builds, plus RANK_FORMAT_VERSION) and lives in
``<root>/<key[:2]>/<key>/``:

    spec.json                  the spec the key was computed from (written first)
    shard-00000.parquet        per-token rows (columns: SHARD_SCHEMA)
    shard-00000.parquet.sha256 {"sha256", "rows", "bytes"} of that shard, written after it
    manifest.json              written last: its presence means the entry is complete

Every file is written to a temporary name, fsynced and atomically renamed
(`rbplab.store.files.atomic_write`), so a killed run leaves either whole files or stray
temporaries (removed by the next writer), never a partial shard that looks finished.
A shard counts as done only if its checksum file exists and matches; a mismatch is
reported with a warning and the shard deleted so the extractor recomputes it.

Reading a complete entry re-verifies every shard. A corrupted shard is then removed
together with the manifest (the entry becomes incomplete) and CacheCorruptedError is
raised: returning bad numbers silently is never an option, and re-running the same
extraction recomputes just the missing shard.

`list_entries` and `remove_entries` read and delete whole entries (under their write lock).

Writers hold a per-key file lock (``<root>/locks/<key>.lock``), so two processes
extracting the same (model, corpus, settings) never interleave their shards.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
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

from rbplab.core.stats import TokenStats
from rbplab.store.files import atomic_write, cache_root, check_writable, location_error

RANK_FORMAT_VERSION = 1

ENTRY_COLUMNS = ["key", "model", "corpus", "n_tokens", "complete", "size_bytes", "created", "path"]

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


class CacheError(RuntimeError):
    """A cache entry cannot be used as asked (incomplete, locked, unknown key, ...)."""


class CacheCorruptedError(CacheError):
    """A complete entry failed its checksums; it has been marked incomplete."""


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

    def __init__(self, root: str | Path | None, spec: dict):
        self.root = cache_root(root)
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
        matches = _matching_dirs(root, key)
        if not matches:
            raise CacheError(f"no cache entry with key {key!r} under {root}")
        if len(matches) > 1:
            raise CacheError(f"key prefix {key!r} matches {len(matches)} cache entries; give more characters")
        spec = _read_spec(matches[0])
        if spec is None:
            raise CacheError(f"cache entry {matches[0]} has no spec.json or manifest.json; remove it")
        entry = cls(root, spec)
        if entry.path != matches[0]:
            raise CacheError(
                f"cache entry {matches[0]} does not match its own spec (edited by hand?); remove it"
            )
        return entry

    # -- files -----------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.key}.lock"

    def shard_path(self, index: int) -> Path:
        return self.path / f"shard-{index:05d}.parquet"

    @staticmethod
    def _checksum_path(shard: Path) -> Path:
        return shard.with_name(shard.name + ".sha256")

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[CacheEntry]:
        """Hold the entry's write lock (one writer per key across processes).

        Checks up front that the cache location is writable, so a run fails before any
        model is loaded. `timeout` None waits indefinitely; on expiry CacheError is raised.
        """
        check_writable(self.root)
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise location_error(err, self.path) from err
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
                if not (self.path / "spec.json").is_file():
                    atomic_write(self.path / "spec.json", _dump(self.spec))
            yield self
        finally:
            self._lock_depth -= 1
            lock.release()

    @property
    def locked(self) -> bool:
        return self._lock_depth > 0

    def _remove_temporaries(self) -> None:
        # Only the lock holder may do this: temporaries belong to dead writers then.
        for tmp in self.path.glob(".*.tmp-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def write_shard(self, index: int, frame: pd.DataFrame, producer: str | None = None) -> None:
        """Store shard `index` (rows of SHARD_SCHEMA) atomically, then its checksum (which records
        the `producer`, e.g. host:pid, for the manifest). Hold lock()."""
        if index < 0:
            raise ValueError(f"shard index must be >= 0, got {index}")
        missing = [name for name in SHARD_SCHEMA.names if name not in frame.columns]
        if missing:
            raise ValueError(f"shard frame lacks columns {missing}; required: {SHARD_SCHEMA.names}")
        table = pa.Table.from_pandas(frame[SHARD_SCHEMA.names], schema=SHARD_SCHEMA, preserve_index=False)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        shard = self.shard_path(index)
        checksum = self._checksum_path(shard)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            # Drop the old checksum first: a shard being replaced must never verify against it.
            checksum.unlink(missing_ok=True)
        except OSError as err:
            raise location_error(err, shard) from err
        atomic_write(shard, data)
        record = {"sha256": _sha256(data), "rows": table.num_rows, "bytes": len(data)}
        atomic_write(checksum, _dump(record | ({"producer": producer} if producer else {})))

    def _shard_record(self, shard: Path) -> dict | None:
        """The checksum record of a shard, if it has one and the shard matches it."""
        try:
            record = json.loads(self._checksum_path(shard).read_text())
            data = shard.read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("sha256") != _sha256(data):
            return None
        return record

    def has_shard(self, index: int) -> bool:
        """Whether shard `index` exists and matches its checksum (reads and hashes that shard only)."""
        return self._shard_record(self.shard_path(index)) is not None

    def completed_shards(self) -> set[int]:
        """Indices of shards whose checksum verifies. Corrupted shards are removed with a warning."""
        done: set[int] = set()
        if not self.path.is_dir():
            return done
        for shard in sorted(self.path.iterdir()):
            match = _SHARD_RE.match(shard.name)
            if not match:
                continue
            index = int(match.group(1))
            has_checksum = self._checksum_path(shard).is_file()
            if self._shard_record(shard) is not None:
                done.add(index)
            elif has_checksum:
                warnings.warn(
                    f"cache entry {self.key[:12]}: shard {index} failed its checksum and was removed; "
                    "it will be recomputed",
                    stacklevel=2,
                )
                self._discard_shard(shard)
            elif self.locked:
                # Renamed into place but the writer died before its checksum: unverifiable.
                self._discard_shard(shard)
        if self.locked:
            for checksum in self.path.glob("shard-*.parquet.sha256"):
                if not checksum.with_suffix("").exists():  # checksum of a shard that is gone
                    checksum.unlink(missing_ok=True)
        return done

    def _discard_shard(self, shard: Path) -> None:
        for path in (self._checksum_path(shard), shard, self.manifest_path):
            with contextlib.suppress(OSError):
                path.unlink()

    def finalize(self, manifest: dict) -> dict:
        """Mark the entry complete: verify shards 0..n-1, then write manifest.json last, atomically.

        `manifest` is the extractor's metadata (model info, corpus, settings, vocab_size);
        the cache adds key, spec, shard list with checksums, n_tokens, created and versions.
        Returns the manifest as written.
        """
        done = sorted(self.completed_shards())
        if not done:
            raise CacheError(f"cannot finalize cache entry {self.key[:12]}: it has no shards")
        if done != list(range(len(done))):
            missing = sorted(set(range(done[-1] + 1)) - set(done))
            raise CacheError(f"cannot finalize cache entry {self.key[:12]}: shards {missing} are missing")
        shards = []
        for index in done:
            shard = self.shard_path(index)
            record = self._shard_record(shard)
            if record is None:
                raise CacheError(f"cache entry {self.key[:12]}: shard {index} changed while finalizing")
            shards.append({"index": index, "file": shard.name, **record})
        producers = sorted({s["producer"] for s in shards if s.get("producer")})
        provenance = {**_versions(), **manifest.get("provenance", {}), "producers": producers}
        full = {
            **manifest,
            "key": self.key,
            "spec": self.spec,
            "rank_format_version": RANK_FORMAT_VERSION,
            "n_tokens": sum(s["rows"] for s in shards),
            "shards": shards,
            "created": manifest.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "provenance": provenance,
        }
        atomic_write(self.manifest_path, _dump(full))
        return full

    # -- reading ---------------------------------------------------------------------------
    def is_complete(self) -> bool:
        return self.manifest_path.is_file()

    def manifest(self) -> dict:
        try:
            return json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            raise CacheError(
                f"cache entry {self.key[:12]} at {self.path} is not complete; run the extraction "
                "(rbplab extract) to finish it"
            ) from None
        except ValueError as err:
            raise self._corrupted(f"its manifest is unreadable ({err})") from err

    def _corrupted(self, what: str) -> CacheCorruptedError:
        """Mark the entry incomplete (drop the manifest) and describe what was wrong."""
        with contextlib.suppress(OSError):
            self.manifest_path.unlink()
        return CacheCorruptedError(
            f"cache entry {self.key[:12]} at {self.path}: {what}. It has been marked incomplete; "
            "re-run the same extraction (rbplab extract) to recompute the damaged part"
        )

    def _verified_shards(self) -> Iterator[bytes]:
        """Bytes of each shard of a complete entry, checked against the manifest's checksums."""
        for record in self.manifest()["shards"]:
            shard = self.path / record["file"]
            try:
                data = shard.read_bytes()
            except OSError as err:
                raise self._corrupted(f"shard {record['index']} is missing or unreadable") from err
            if _sha256(data) != record["sha256"]:
                warnings.warn(
                    f"cache entry {self.key[:12]}: shard {record['index']} is corrupted", stacklevel=4
                )
                self._discard_shard(shard)
                raise self._corrupted(f"shard {record['index']} failed its checksum and was removed")
            yield data

    def verify(self) -> None:
        """Check every shard of a complete entry; raises CacheCorruptedError (entry marked incomplete)."""
        for _ in self._verified_shards():
            pass

    def _read_tables(self, columns: list[str] | None) -> pa.Table:
        tables = [pq.read_table(pa.BufferReader(data), columns=columns) for data in self._verified_shards()]
        if not tables:
            return SHARD_SCHEMA.empty_table().select(columns or SHARD_SCHEMA.names)
        return pa.concat_tables(tables)

    def read_frame(self, columns: list[str] | None = None) -> pd.DataFrame:
        """All per-token rows of a complete entry, in shard order (checksums verified)."""
        return self._read_tables(columns).to_pandas()

    def read_stats(self) -> TokenStats:
        frame = self.read_frame(["doc_index", "position", "n_greater", "n_equal", "nll"])
        return TokenStats.from_frame(frame, ranked_vocab_size(self.manifest()), doc_column="doc_index")


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


def _entry_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("??/*") if p.is_dir() and _KEY_RE.match(p.name))


def _matching_dirs(root: Path, prefix: str) -> list[Path]:
    prefix = prefix.lower()
    return [p for p in _entry_dirs(root) if p.name.startswith(prefix)]


def _read_spec(path: Path) -> dict | None:
    for name in ("manifest.json", "spec.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((path / name).read_text())
            return data["spec"] if name == "manifest.json" else data
    return None


def _label(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("name", "name_or_path", "id", "path"):
            if value.get(key):
                return str(value[key])
        return json.dumps(value, sort_keys=True)
    return None if value is None else str(value)


def list_entries(root: str | Path | None = None) -> pd.DataFrame:
    """One row per cache entry: key, model, corpus, n_tokens (so far, for incomplete entries),
    complete, size_bytes, created (UTC), path. Oldest first."""
    rows = []
    for path in _entry_dirs(cache_root(root)):
        manifest = None
        with contextlib.suppress(OSError, ValueError):
            manifest = json.loads((path / "manifest.json").read_text())
        spec = (manifest or {}).get("spec") or _read_spec(path) or {}
        if manifest is not None:
            n_tokens = manifest.get("n_tokens")
        else:
            n_tokens = 0
            for checksum in path.glob("shard-*.parquet.sha256"):
                with contextlib.suppress(OSError, ValueError, TypeError):
                    n_tokens += int(json.loads(checksum.read_text())["rows"])
        files = [f for f in path.iterdir() if f.is_file()]
        created = (manifest or {}).get("created")
        rows.append(
            {
                "key": path.name,
                "model": _label(spec.get("model")),
                "corpus": _label(spec.get("corpus")),
                "n_tokens": n_tokens,
                "complete": manifest is not None,
                "size_bytes": sum(f.stat().st_size for f in files),
                "created": pd.Timestamp(created) if created else pd.Timestamp(path.stat().st_mtime, unit="s"),
                "path": str(path),
            }
        )
    table = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
    table["n_tokens"] = table["n_tokens"].astype("Int64")
    table["complete"] = table["complete"].astype(bool)
    table["size_bytes"] = table["size_bytes"].astype("int64")
    table["created"] = pd.to_datetime(table["created"], utc=True)
    return table.sort_values("created", kind="stable").reset_index(drop=True)


def remove_entries(
    prefixes: str | Iterable[str] = (), *, root: str | Path | None = None, incomplete: bool = False
) -> list[str]:
    """Delete entries whose key starts with any of `prefixes` (and, with `incomplete`, every
    incomplete entry). "" matches everything. Entries being written are refused. Returns removed keys."""
    root = cache_root(root)
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    targets: dict[str, Path] = {}
    for prefix in prefixes:
        matches = _matching_dirs(root, prefix)
        if not matches:
            raise CacheError(f"no cache entry matches key prefix {prefix!r} under {root}")
        targets.update((p.name, p) for p in matches)
    if incomplete:
        targets.update((p.name, p) for p in _entry_dirs(root) if not (p / "manifest.json").is_file())
    removed = []
    for key, path in sorted(targets.items()):
        lock = FileLock(str(root / "locks" / f"{key}.lock"), timeout=0)
        try:
            (root / "locks").mkdir(parents=True, exist_ok=True)
            with lock:
                shutil.rmtree(path)
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
