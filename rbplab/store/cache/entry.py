"""The writer's side of a cache entry: its lock, shard claims, atomic writes and finalization.

`CacheEntry` writes spec.json first, each shard and then its .sha256 record, the summary, and
manifest.json last: its presence means the entry is complete. Writers hold a per-key file lock, so
two processes on one key never interleave; removal deletes manifest.json first and spec.json last.
What this guarantees is in docs/cache.md ("What the cache guarantees").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from rbplab.core.errors import RbplabWarning
from rbplab.core.settings import EntrySpec
from rbplab.core.stats import SUMMARY_VERSION, EntrySummary, summarize
from rbplab.store.cache import index as cache_index
from rbplab.store.cache.entry_rules import SHARD_IDENTITY
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    MISSING,
    RANK_FORMAT_VERSION,
    SHA256_RE,
    SHARD_INDEX_META,
    SHARD_SCHEMA,
    SUMMARY_FILE,
    TEMPORARY_RE,
    TOKEN_COLUMNS,
    checksum_name,
    is_cache_file,
    json_bytes,
    lookup,
    matching_dirs,
    max_shard_rows,
    sha256_hex,
    shard_index,
    shard_name,
)
from rbplab.store.cache.reading import CacheError, EntryReader, read_spec, summary_bytes
from rbplab.store.files import (
    UnsafeFileError,
    atomic_write,
    cache_root,
    check_writable,
    ensure_entry_dir,
    ensure_real_dir,
    entry_dir_problem,
    entry_file_problem,
    held_lock,
    location_error,
)


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for package in ("rbplab", "torch", "transformers", "tokenizers", "pyarrow", "pandas", "numpy"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    return out


class CacheEntry(EntryReader):
    """One (model, corpus, settings) result in the cache, to read and to write."""

    def __init__(self, root: str | Path | None, spec: dict | EntrySpec):
        super().__init__(root, spec)
        self._lock_depth = 0
        self._file_lock: FileLock | None = None

    @classmethod
    def open(cls, key: str, root: str | Path | None = None) -> CacheEntry:
        """The existing entry whose key starts with `key` (a unique prefix is enough)."""
        root = cache_root(root)
        full = key.lower()
        if SHA256_RE.match(full):  # a whole key names one directory: no need to list the cache
            path = root / full[:2] / full
            matches = [path] if path.is_dir() else []  # as `entry_dirs` lists it, links included
        else:
            matches = matching_dirs(root, key)
        if not matches:
            raise CacheError(f"no cache entry with key {key!r} under {root}")
        if len(matches) > 1:
            raise CacheError(f"key prefix {key!r} matches {len(matches)} cache entries; give more characters")
        spec = read_spec(matches[0])
        if spec is None:
            raise CacheError(
                f"cache entry {matches[0].name[:12]} at {matches[0]} is damaged: no spec.json that hashes "
                "to its directory name; remove it (rbplab cache rm)"
            )
        return cls(root, spec)

    # -- writing ---------------------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.key}.lock"

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
                if self.spec_problem() is not None:  # missing, or not this entry's (a cache file)
                    atomic_write(self.path / "spec.json", json_bytes(self.spec))
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
            p for p in self.path.glob(".*.tmp-*") if is_cache_file(p.name) and TEMPORARY_RE.match(p.name)
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
            warnings.warn(
                f"cache entry {self.key[:12]}: {problem}; it was removed", RbplabWarning, stacklevel=4
            )

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
            ENTRY_KEY_META: self.key.encode(),
            SHARD_INDEX_META: b"%d" % index,
        }
        table = table.replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        return sink.getvalue().to_pybytes()

    def write_shard(self, index: int, frame: pd.DataFrame, provenance: dict | None = None) -> None:
        """Store shard `index` (rows of SHARD_SCHEMA) atomically, then its checksum, which records
        `provenance` for the manifest: "producer" (host:pid), "head" and "settled" (rows with a logit
        inside the error band, settled by exact sign). Hold lock()."""
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
        record = {"sha256": sha256_hex(data), "rows": len(frame), "bytes": len(data)}
        atomic_write(checksum, json_bytes(record | (provenance or {})))

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
        with held_lock(path, wait) as held:
            yield held

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
            record, problem = self.checksum_record(index)
            if record is not None:
                _, problem = self.check_shard(index, record, through=SHARD_IDENTITY)
                if problem is None:
                    done.add(index)
                    continue
            if has_checksum:
                reason = problem or f"shard {index} failed its checksum"
                warnings.warn(
                    f"cache entry {self.key[:12]}: {reason}; it was removed and will be recomputed",
                    RbplabWarning,
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

    def finalize(self, manifest: dict, n_shards: int | None = None) -> dict:
        """Mark the entry complete: verify shards 0..n-1, then write manifest.json last, atomically.

        `n_shards`, when the caller knows it (the extractor planned the shards), is how many there
        must be: a shard that vanished or failed meanwhile then stops the finalization instead of
        making a shorter entry.

        `manifest` is the extractor's metadata (model info, corpus, settings, vocab_size);
        the cache adds key, spec, shard list with checksums, n_tokens, created and versions.
        Returns the manifest as written.
        """
        if lookup(self.spec, ("vocab", "size")) is MISSING and "vocab_size" not in manifest:
            raise CacheError(
                f"cannot finalize cache entry {self.key[:12]}: neither its spec nor the manifest "
                "gives vocab_size"
            )
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
            checked = self._checksummed_shard(index)
            if checked is None:
                raise CacheError(f"cache entry {self.key[:12]}: shard {index} changed while finalizing")
            record, data = checked
            tables.append(pq.read_table(pa.BufferReader(data), columns=list(TOKEN_COLUMNS)))
            shards.append({"index": index, "file": shard_name(index), **record})
        # The summary is derived here, by whoever completes the entry (a Ray worker, a SLURM task),
        # from the shards just verified; the manifest records its checksum.
        summary = summarize(self._stats_of(pa.concat_tables(tables), manifest))
        summary_record = self._write_summary(summary)
        del tables
        producers = sorted({s["producer"] for s in shards if s.get("producer")})
        provenance = {**_versions(), **manifest.get("provenance", {}), "producers": producers}
        # Which heads ranked, and how many rows they settled in float64: known when every shard
        # says (a shard written by an older rbplab does not).
        if all(isinstance(s.get("settled"), int) and s.get("head") for s in shards):
            provenance["heads"] = sorted({s["head"] for s in shards})
            provenance["settled_rows"] = sum(s["settled"] for s in shards)
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
        atomic_write(self.manifest_path, json_bytes(full))
        # The index row last: a run killed before it leaves a complete entry without one, which a
        # read derives from the summary; never a row for an entry that is not complete.
        cache_index.add_row(self.root, cache_index.row_of(self.key, summary, summary_record))
        return full

    def _write_summary(self, summary: EntrySummary) -> dict:
        """Write `summary` (of tokens in memory) into this entry (whose lock the caller holds), then
        its record; returns the record."""
        data = summary_bytes(summary, self.key)
        record = {"sha256": sha256_hex(data), "bytes": len(data), "version": SUMMARY_VERSION}
        checksum = self.path / checksum_name(SUMMARY_FILE)
        checksum.unlink(missing_ok=True)  # a summary being replaced must never verify against it
        atomic_write(self.summary_path, data)
        atomic_write(checksum, json_bytes(record))
        return record

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
        problem, summary = self._stored_summary(manifest)
        if summary is not None:
            return summary
        if problem is not None:
            warnings.warn(
                f"cache entry {self.key[:12]}: {problem}; deriving it again from the shards",
                RbplabWarning,
                stacklevel=2,
            )
        return self.derive_summary(manifest)

    def stored_summary_checked(self, manifest: dict) -> tuple[str | None, EntrySummary | None]:
        """(None, summary) when the stored summary passes every rule (its per-document tables too),
        (why not, None) otherwise, (None, None) when there is none; writes nothing (verify)."""
        return self._stored_summary(manifest, full=True)

    def stored_summary(self, manifest: dict) -> tuple[EntrySummary, dict | None]:
        """(summary, record): `summary(manifest)`, and the manifest's record of the summary file it
        was read from (None when it was derived again: its row is then written by
        `derive_summary`)."""
        problem, summary = self._stored_summary(manifest)
        if summary is not None:
            return summary, manifest["summary"]
        return self.summary(manifest), None

    def derive_summary(self, manifest: dict | None = None) -> EntrySummary:
        """The summary of the entry's verified shards, derived now and stored in place of whatever
        summary it had (the manifest's record written again); in a read-only cache it is kept in
        memory, with a one-line notice. `manifest`: the checked one, when the caller has it."""
        manifest = self.manifest() if manifest is None else manifest
        derived = summarize(self.read_stats()).complete()
        try:
            check_writable(self.root)
            with self.lock():
                record = self._write_summary(derived)
                if manifest.get("summary") != record:  # the derived summary is the truth: record it
                    atomic_write(self.manifest_path, json_bytes({**manifest, "summary": record}))
                cache_index.add_row(self.root, cache_index.row_of(self.key, derived, record), replace=True)
        except (OSError, Timeout) as err:
            warnings.warn(
                f"cache entry {self.key[:12]}: summary derived in memory, not stored ({err})",
                RbplabWarning,
                stacklevel=2,
            )
        return dataclasses.replace(derived, stats=None, load_tokens=self.read_stats)


def open_summaries(
    opened: list[tuple[CacheEntry, dict]], root: str | Path | None = None
) -> list[EntrySummary]:
    """The summary of each (entry, its checked manifest) of `opened`, for a study: from the cache's
    index where it holds a row that every index rule accepts against the entry (`IndexedSummary`:
    the summary file itself is read only when an analysis needs more than the row), otherwise read
    from the summary as `CacheEntry.summary` does, its row derived and added. Row files are then
    merged into the index when no other process holds it (a writable cache only)."""
    root = cache_root(root)
    found = cache_index.CacheIndex(root)
    for problem in found.problems[:1]:  # the entries' summaries stand in for what it cannot give
        warnings.warn(
            f"the cache index: {problem}; its entries' summaries are read instead",
            RbplabWarning,
            stacklevel=3,
        )
    out: list[EntrySummary] = []
    rows: dict[str, cache_index.IndexRow] = {}
    derived = False
    for entry, manifest in opened:
        row, problem = found.row_for(entry, manifest)
        if row is None:
            if problem is not None:
                warnings.warn(
                    f"cache entry {entry.key[:12]}: {problem}; reading its summary",
                    RbplabWarning,
                    stacklevel=3,
                )
            summary, record = entry.stored_summary(manifest)
            if record is None:  # derived again: kept whole (rare), its row already written
                out.append(summary)
                continue
            row = cache_index.row_of(entry.key, summary, record)
            derived = True
        rows[entry.key] = row
        out.append(cache_index.IndexedSummary(row, _summary_reader(entry, manifest)))
    if (derived or found.row_files) and os.access(root, os.W_OK):
        try:
            cache_index.merge(root, found, rows, wait=False)
        except OSError as err:
            warnings.warn(
                f"the cache index was not updated ({err}); reads will use the summaries",
                RbplabWarning,
                stacklevel=2,
            )
    return out


def _summary_reader(entry: CacheEntry, manifest: dict):
    return lambda: entry.summary(manifest)


def entry_at(path: Path, root: Path | None = None) -> CacheEntry | None:
    """The CacheEntry of an entry directory, None when no spec on disk hashes to its name."""
    spec = read_spec(path)
    return None if spec is None else CacheEntry(root if root is not None else path.parent.parent, spec)


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
