"""Reading a cache entry back, every file checked by the rules: its summary (one parquet file
beside the shards), its manifest and its shards.

An entry's summary on disk: one parquet file beside the shards, written and checked like them.

The summary (`rbplab.core.stats.EntrySummary`) is stored as ONE parquet row of list columns
(zstd), its metadata naming the entry key, the summary version, |V| and the token count.
`parse_summary` reads it back and judges it by the rules of `rbplab.store.cache.rules` (every
relation the numbers must satisfy, derived again): `SummaryError` names the first one broken, and
the entry (`CacheEntry.summary`) then derives the summary again from its verified shards.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.core.documents import parse_json
from rbplab.core.errors import RbplabError, RbplabWarning
from rbplab.core.settings import EntrySpec
from rbplab.core.stats import RUN_TIES, SUMMARY_VERSION, TIES, EntrySummary, HitRuns, TokenStats, summarize
from rbplab.store.cache import rules
from rbplab.store.cache.entry_rules import (
    SHARD_CHECKSUM,
    SHARD_IDENTITY,
    Manifest,
    Shard,
    ShardFile,
    ShardRecords,
    SpecFile,
    record_problem,
)
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    MAX_RECORD_BYTES,
    MAX_SPEC_BYTES,
    MISSING,
    SHARD_SCHEMA,
    SUMMARY_FILE,
    SUMMARY_NLL_SQ_META,
    SUMMARY_TOKENS_META,
    SUMMARY_VERSION_META,
    SUMMARY_VOCAB_META,
    TOKEN_COLUMNS,
    cache_key,
    checksum_name,
    is_cache_file,
    lookup,
    max_manifest_bytes,
    max_summary_bytes,
    sha256_hex,
    shard_index,
    shard_name,
)
from rbplab.store.cache.summary_rules import Summary, SummaryDerivation, SummaryDocuments, SummaryFile
from rbplab.store.files import (
    UnsafeFileError,
    cache_root,
    entry_dir_problem,
    entry_file_problem,
    read_entry_file,
)


class SummaryError(RbplabError, ValueError):
    """A summary file that cannot be believed (damaged, foreign, stale or inconsistent)."""


def _list_column(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.array([np.ascontiguousarray(values)], type=pa.list_(kind))


def _runs_columns(table: dict[tuple[str, int], HitRuns], per_document: bool) -> dict[str, np.ndarray]:
    keys = sorted(table, key=lambda tk: (RUN_TIES.index(tk[0]), tk[1]))
    parts = [table[key] for key in keys]
    columns = {
        "tie": np.concatenate(
            [np.full(len(p.length), RUN_TIES.index(t)) for (t, _), p in zip(keys, parts, strict=True)]
        ),
        "k": np.concatenate([np.full(len(p.length), k) for (_, k), p in zip(keys, parts, strict=True)]),
        "length": np.concatenate([p.length for p in parts]),
        "count": np.concatenate([p.count for p in parts]),
    }
    if per_document:
        columns["doc"] = np.concatenate([p.doc for p in parts])
    return {name: np.asarray(v, dtype=np.int64) for name, v in columns.items()} if parts else {}


def summary_bytes(summary: EntrySummary, key: str) -> bytes:
    """The summary file's bytes for entry `key` (every hit-run histogram computed first).
    Conventions whose numbers equal the optimistic ones (no tied token) are not repeated."""
    summary.complete()
    tied = summary.has_ties
    arrays: dict[str, tuple[np.ndarray, pa.DataType]] = {
        "pair_greater": (summary.pairs.greater, pa.int64()),
        "pair_equal": (summary.pairs.equal, pa.int64()),
        "pair_count": (summary.pairs.count, pa.int64()),
        "pair_nll": (summary.pairs.nll_sum, pa.float64()),
        "ks": (summary.ks, pa.int64()),
        "doc_tokens": (summary.doc_tokens, pa.int64()),
        "doc_nll": (summary.doc_nll, pa.float64()),
        "doc_p": (summary.doc_p, pa.float64()),
        "seg_doc": (summary.seg_doc, pa.int64()),
        "seg_start": (summary.seg_start, pa.int64()),
        "seg_length": (summary.seg_length, pa.int64()),
        "bucket_tokens": (summary.bucket_tokens, pa.int64()),
    }
    for ties in TIES if tied else ("optimistic",):
        kind = pa.float64() if ties == "expected" else pa.int64()
        arrays[f"hits_{ties}"] = (summary.hits[ties].ravel(), kind)
    for ties in RUN_TIES if tied else ("optimistic",):
        arrays[f"bucket_hits_{ties}"] = (summary.bucket_hits[ties].ravel(), pa.int64())
    runs = {t: {k: v for k, v in summary.runs.items() if k[0] == t} for t in RUN_TIES}
    doc_runs = {t: {k: v for k, v in summary.doc_runs.items() if k[0] == t} for t in RUN_TIES}
    if not tied:  # pessimistic runs equal optimistic ones: keep one copy
        runs.pop("pessimistic")
        doc_runs.pop("pessimistic")
    for name, value in _runs_columns(
        {k: v for part in runs.values() for k, v in part.items()}, False
    ).items():
        arrays[f"run_{name}"] = (value, pa.int64())
    merged = {k: v for part in doc_runs.values() for k, v in part.items()}
    for name, value in _runs_columns(merged, True).items():
        arrays[f"doc_run_{name}"] = (value, pa.int64())
    table = pa.table({name: _list_column(np.asarray(v), kind) for name, (v, kind) in arrays.items()})
    table = table.replace_schema_metadata(
        {
            ENTRY_KEY_META: key.encode(),
            SUMMARY_VERSION_META: str(SUMMARY_VERSION).encode(),
            SUMMARY_VOCAB_META: str(summary.vocab_size).encode(),
            SUMMARY_TOKENS_META: str(summary.n_tokens).encode(),
            SUMMARY_NLL_SQ_META: float(summary.nll_sq_sum).hex().encode(),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", compression_level=9)
    return sink.getvalue()


_DOCUMENT_COLUMNS = ("hits_", "doc_run_")  # prefixes of the per-document tables' columns


def summary_table(data: bytes) -> pa.Table:
    """Every column of the summary file `data`, with its metadata (for comparing two summaries:
    `summary_rules.SummaryDerivation`); SummaryError when it is not a readable parquet file."""
    try:
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        raise SummaryError(f"the summary is not a readable parquet file ({err})") from None


def _check(subject: Summary | SummaryDocuments) -> None:
    problem = rules.first_problem(subject)
    if problem is not None:
        raise SummaryError(problem)


def parse_summary(
    data: bytes,
    key: str,
    vocab_size: int,
    n_tokens: int,
    load_tokens: Callable[[], TokenStats] | None = None,
    reload: Callable[[], bytes] | None = None,
) -> EntrySummary:
    """The summary in `data`, written for entry `key` of |V| = vocab_size and n_tokens tokens
    (both derived by the caller from the entry's spec and verified manifest); SummaryError names
    the first rule the file breaks (`rbplab.store.cache.summary_rules`, scopes `Summary` and
    `SummaryDocuments`). Only the pooled parts are read and kept; the per-document tables are read
    again through `reload` when an analysis asks for them (the file must still have the bytes
    checked here) and checked then (default: kept from `data`)."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        names = parquet.schema_arrow.names
        pooled = [n for n in names if not n.startswith(_DOCUMENT_COLUMNS)]
        table = parquet.read(columns=pooled)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise SummaryError(f"the summary is not a readable parquet file ({err})") from None
    summary = Summary(table, parquet.schema_arrow.metadata or {}, key, vocab_size, n_tokens)
    _check(summary)

    # Without `reload` the bytes stay in memory for the document tables (tests, in-memory use); with
    # it, nothing of the file is kept: a study of thousands of entries holds only pooled arrays.
    kept = data if reload is None else None

    def documents() -> tuple[dict, dict]:
        fresh = kept if reload is None else reload()
        if hashlib.sha256(fresh).hexdigest() != digest:
            raise SummaryError("the summary changed since it was opened")
        try:
            doc_table = pq.read_table(pa.BufferReader(fresh), columns=[n for n in names if n not in pooled])
        except (pa.ArrowException, OSError, ValueError) as err:
            raise SummaryError(f"the summary's document tables are unreadable ({err})") from None
        tables = SummaryDocuments(doc_table, summary)
        _check(tables)
        return tables.hits, tables.runs

    column = summary.column
    return EntrySummary(
        vocab_size=vocab_size,
        n_tokens=n_tokens,
        nll_sq_sum=summary.nll_sq_sum,
        pairs=summary.pairs,
        ks=summary.ks,
        doc_tokens=column("doc_tokens"),
        doc_nll=column("doc_nll"),
        doc_p=column("doc_p"),
        hits={},
        seg_doc=column("seg_doc"),
        seg_start=column("seg_start"),
        seg_length=column("seg_length"),
        bucket_tokens=column("bucket_tokens"),
        bucket_hits=summary.hits,
        runs=summary.runs,
        doc_runs={},
        load_tokens=load_tokens,
        load_documents=documents,
    )


class CacheError(RbplabError, RuntimeError):
    """A cache entry cannot be used as asked (incomplete, locked, unknown key, ...)."""


class CacheCorruptedError(CacheError):
    """A complete entry failed its checks; it has been marked incomplete (when writable)."""


class EntryReader:
    """One (model, corpus, settings) result in the cache, read only (`CacheEntry` also writes)."""

    def __init__(self, root: str | Path | None, spec: dict | EntrySpec):
        self.root = cache_root(root)
        spec = spec.to_json() if isinstance(spec, EntrySpec) else spec
        self.spec = spec
        self.key = cache_key(spec)
        self.path = self.root / self.key[:2] / self.key

    def __repr__(self) -> str:
        state = "complete" if self.is_complete() else "incomplete"
        return f"{type(self).__name__}(key={self.key[:12]}..., {state}, path={self.path})"

    # -- files -----------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def shard_path(self, index: int) -> Path:
        return self.path / shard_name(index)

    @staticmethod
    def _checksum_path(path: Path) -> Path:
        return path.with_name(checksum_name(path.name))

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

    def spec_problem(self) -> str | None:
        """Why spec.json is not this entry's spec, or None."""
        try:
            on_disk = parse_json(self.read_file("spec.json", MAX_SPEC_BYTES), "spec.json")
        except FileNotFoundError:
            return "spec.json is missing"
        except UnsafeFileError as err:
            return str(err)
        except (OSError, ValueError) as err:
            return f"spec.json is unreadable ({err})"
        return rules.first_problem(SpecFile(self.key, on_disk))

    def checksum_record(self, index: int) -> tuple[dict | None, str | None]:
        """(record, None) of shard `index`'s .sha256 file, or (None, why it has no usable one)."""
        name = checksum_name(shard_name(index))
        try:
            record = parse_json(self.read_file(name, MAX_RECORD_BYTES), name)
        except FileNotFoundError:
            return None, f"shard {index} has no checksum file"
        except UnsafeFileError as err:
            return None, str(err)
        except (OSError, ValueError) as err:
            return None, f"{name} is unreadable ({err})"
        problem = record_problem(record, self.spec)
        if problem is not None:
            return None, f"{name} {problem}"
        return record, None

    def check_shard(
        self, index: int, record: dict, *, through: str | None = None
    ) -> tuple[bytes | None, str | None]:
        """(bytes, problem) of shard `index` against `record` (a checked record) by the shard rules
        of `rules` (up to the one named `through`); problem None when they hold. The bytes come
        back whenever they were read, so a caller can discard a shard that failed."""
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
        return data, rules.first_problem(Shard(self.key, index, record, data), through=through)

    def _checksummed_shard(self, index: int) -> tuple[dict, bytes] | None:
        """(record, bytes) of shard `index` if it has a valid checksum record and matches it."""
        record, problem = self.checksum_record(index)
        if problem is not None:
            return None
        data, problem = self.check_shard(index, record, through=SHARD_CHECKSUM)
        return None if problem is not None else (record, data)

    def has_shard(self, index: int) -> bool:
        """Whether shard `index` exists and matches its checksum (reads and hashes that shard only)."""
        return self._checksummed_shard(index) is not None

    def recorded_rows(self, index: int) -> int:
        """Rows that shard `index`'s checksum record claims (0 when it has none). Cheap and
        unverified: for progress displays only, never for data."""
        record, _ = self.checksum_record(index)
        return 0 if record is None else int(record["rows"])

    def _discard_shard(self, index: int) -> None:
        """Delete shard `index`, its checksum and the manifest: names derived here, never read."""
        shard = self.shard_path(index)
        for path in (self._checksum_path(shard), shard, self.manifest_path):
            with contextlib.suppress(OSError):
                path.unlink()

    # -- reading ---------------------------------------------------------------------------
    def is_complete(self) -> bool:
        """Whether the entry has a manifest.json (of any kind: one that is not a regular file makes
        a damaged entry, never an incomplete one that a resume would trip over)."""
        return entry_dir_problem(self.path) is None and os.path.lexists(self.manifest_path)

    def load_manifest(self) -> Any:
        """The parsed manifest.json, unchecked; FileNotFoundError, UnsafeFileError, OSError or
        ValueError."""
        return parse_json(self.read_file("manifest.json", max_manifest_bytes(self.spec)), "manifest.json")

    def _raw_manifest(self, mark_damaged: bool = True) -> dict:
        problem = entry_dir_problem(self.path)
        if problem is not None:
            raise CacheCorruptedError(
                f"cache entry {self.key[:12]} at {self.path} cannot be read: {problem}; remove the link "
                f"(rbplab cache rm {self.key[:12]})"
            )
        try:
            manifest = self.load_manifest()
        except FileNotFoundError:
            raise CacheError(
                f"cache entry {self.key[:12]} at {self.path} is not complete; run the extraction "
                "(rbplab extract) to finish it"
            ) from None
        except UnsafeFileError as err:
            raise self._damage(str(err), mark_damaged) from None
        except ValueError as err:
            raise self._damage(f"its manifest is unreadable ({err})", mark_damaged) from err
        except OSError as err:
            raise CacheError(
                f"cache entry {self.key[:12]}: cannot read {self.manifest_path} ({err})"
            ) from err
        return manifest

    def manifest(self, *, mark_damaged: bool = True) -> dict:
        """The manifest of a complete entry, after every manifest rule of `rules` (none reads shard
        bytes); a violation raises CacheCorruptedError and marks the entry incomplete unless
        `mark_damaged` is false (`rbplab plan` writes nothing)."""
        manifest = self._raw_manifest(mark_damaged)
        problems = self.manifest_problems(manifest)
        if problems:
            raise self._damage(problems[0], mark_damaged)
        return manifest

    def shard_file_problems(self, manifest: dict) -> dict[int, str]:
        """{index: problem} for each shard a checked manifest lists whose file is missing, not a
        regular file or not the size its record says, or whose .sha256 record is missing or
        disagrees with the manifest: stat calls and record reads, no shard byte read or hashed
        (what `cache ls`, `rbplab plan` and a cache hit check; a shard changed in place at its
        size is found when read, or by `cache verify`)."""
        found: dict[int, str] = {}
        for record in manifest["shards"]:
            index = record["index"]
            try:
                info = os.lstat(self.shard_path(index))
            except OSError:
                info = None
            problem = rules.first_problem(ShardFile(index, record, info))
            if problem is None:
                problem = rules.first_problem(ShardRecords(index, record, self.checksum_record(index)))
            if problem is not None:
                found[index] = problem
        return found

    def manifest_problems(self, manifest: Any) -> list[str]:
        """Every manifest rule of `verify` that `manifest` (read from this entry) breaks: all that
        can be checked without reading shard bytes."""
        names = ()
        if entry_dir_problem(self.path) is None and self.path.is_dir():
            names = tuple(sorted(os.listdir(self.path)))  # names only: no Path per item
        return rules.problems(Manifest(self.key, self.spec, manifest, self.spec_problem(), names))

    def damaged(self, what: str) -> CacheCorruptedError:
        """Mark the entry incomplete (drop the manifest, when the cache is writable) and return the
        error describing `what` is wrong: for checks made outside the store (derived counts)."""
        return self._corrupted(what)

    def _damage(self, what: str, mark: bool) -> CacheCorruptedError:
        """The error describing `what` is wrong, the entry marked incomplete first when `mark`."""
        if mark:
            return self._corrupted(what)
        return CacheCorruptedError(f"cache entry {self.key[:12]} at {self.path} is damaged: {what}")

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

    def shard_problem(self, record: dict) -> tuple[str | None, bytes | None]:
        """Every shard rule for the shard a (checked) manifest record stands for: (problem, bytes).
        The bytes come back whenever they were read and the shard itself is at fault, so a caller
        can discard it; a .sha256 record that disagrees leaves the sound shard in place."""
        index = record["index"]
        data, problem = self.check_shard(index, record)
        if problem is None:
            problem = rules.first_problem(ShardRecords(index, record, self.checksum_record(index)))
            if problem is not None:
                return problem, None
        return problem, data

    def _verified_shards(self) -> Iterator[bytes]:
        """Bytes of each shard of a complete entry, after every rule of `verify`."""
        for record in self.manifest()["shards"]:
            problem, data = self.shard_problem(record)
            if problem is not None:
                warnings.warn(
                    f"cache entry {self.key[:12]} is corrupted: {problem}", RbplabWarning, stacklevel=4
                )
                if data is not None:
                    self._discard_shard(record["index"])
                raise self._corrupted(problem + ("" if data is None else "; the shard was removed"))
            yield data

    def problems(self, summary: bool = True, *, derive: bool = False) -> list[str]:
        """Everything wrong with this entry, complete or not, one line each (what `rbplab cache
        verify` prints; the summary's too unless `summary` is false, compared with the one its
        shards give with `derive`: `summary_problems`); deletes nothing and follows no link (a
        linked entry or prefix folder is reported, never read through)."""
        folder = entry_dir_problem(self.path)
        if folder is not None:
            return [folder]
        if not self.path.is_dir():
            return [f"{self.path} does not exist"]
        found = self.odd_items()
        if self.is_complete():
            try:
                manifest = self.load_manifest()
            except UnsafeFileError as err:
                return found if str(err) in found else [*found, str(err)]
            except (OSError, ValueError) as err:
                return [*found, f"its manifest is unreadable ({err})"]
            manifest_problems = self.manifest_problems(manifest)
            if manifest_problems:
                return found + manifest_problems
            for record in manifest["shards"]:
                problem, _ = self.shard_problem(record)
                if problem is not None and problem not in found:
                    found.append(problem)
            if summary and not found:
                found += self.summary_problems(manifest, derive=derive)
            return found
        spec_problem = self.spec_problem()
        if spec_problem and spec_problem not in found:
            found.append(spec_problem)
        for shard in sorted(self.path.iterdir()):
            index = shard_index(shard.name)
            if index is None or entry_file_problem(shard) is not None:
                continue  # odd items are reported above
            if not os.path.lexists(shard.with_name(checksum_name(shard.name))):
                found.append(f"shard {index} has no checksum file (an interrupted write)")
                continue
            record, problem = self.checksum_record(index)
            if problem is None:
                _, problem = self.check_shard(index, record, through=SHARD_IDENTITY)
            if problem is not None and problem not in found:
                found.append(problem)
        return found

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
            problem, data = self.shard_problem(records[index])
            if problem is None:
                return data
            problems = [problem]
        raise self._damage(problems[0], mark_damaged)

    def verified_files(self) -> Iterator[tuple[str, bytes]]:
        """(name, bytes) of every file of a complete entry in the order an archive holds them
        (spec.json, each shard and its .sha256, manifest.json last), each read once and checked:
        the bytes handed out are the bytes verified. CacheCorruptedError on any problem."""
        manifest_bytes = self.read_file("manifest.json", max_manifest_bytes(self.spec))
        manifest = self.manifest()
        yield "spec.json", self.read_file("spec.json", MAX_SPEC_BYTES)
        for record in manifest["shards"]:
            index = record["index"]
            problem, data = self.shard_problem(record)
            if problem is not None:
                raise self._corrupted(problem)
            yield shard_name(index), data
            checksum = checksum_name(shard_name(index))
            yield checksum, self.read_file(checksum, MAX_RECORD_BYTES)
        yield from self._verified_summary_files(manifest)
        if parse_json(manifest_bytes, "manifest.json") != manifest:
            raise self._corrupted("manifest.json changed while being read")
        yield "manifest.json", manifest_bytes

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
        return self._stats_of(self._read_tables(list(TOKEN_COLUMNS)))

    def vocab_size(self, manifest: dict | None = None) -> int:
        """|V| the ranks were taken over: the spec's, else what `manifest` (default: this entry's,
        checked) records (`ranked_vocab_size`)."""
        vocab = lookup(self.spec, ("vocab", "size"))
        return int(vocab) if vocab is not MISSING else ranked_vocab_size(manifest or self.manifest())

    def _stats_of(self, table: pa.Table, manifest: dict | None = None) -> TokenStats:
        frame = table.select(list(TOKEN_COLUMNS)).to_pandas()
        return TokenStats.from_frame(frame, self.vocab_size(manifest), doc_column="doc_index")

    # -- the summary ---------------------------------------------------------------------------
    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY_FILE

    def has_summary(self) -> bool:
        """Whether a summary file is present (checked only when read)."""
        return os.path.lexists(self.summary_path)

    def summary_problems(self, manifest: dict | None = None, *, derive: bool = False) -> list[str]:
        """What is wrong with the summary of a complete entry (every table checked), one line. With
        `derive`, a summary whose own rules hold is also compared with the one its verified shards
        give, derived now (every shard read and its tokens summarised: what `rbplab cache verify`,
        `cache repair` and `cache import` do; a plain read never does)."""
        manifest = manifest or self.manifest()
        problem, summary = self._stored_summary(manifest, full=True)
        if problem is None and summary is not None and derive:
            problem = self._derivation_problem(manifest)
        return [] if problem is None else [problem]

    def _derivation_problem(self, manifest: dict) -> str | None:
        """Why the stored summary (its own rules checked) is not the one the entry's shards give, or
        None. Deletes nothing: a shard that fails now is named, not discarded."""
        tables = []
        for record in manifest["shards"]:
            problem, data = self.shard_problem(record)
            if problem is not None:
                return problem
            tables.append(pq.read_table(pa.BufferReader(data), columns=list(TOKEN_COLUMNS)))
        empty = SHARD_SCHEMA.empty_table().select(list(TOKEN_COLUMNS))
        stats = self._stats_of(pa.concat_tables(tables) if tables else empty, manifest)
        derived = summary_bytes(summarize(stats), self.key)
        try:
            stored = read_entry_file(
                self.summary_path, self.path, max_summary_bytes(int(manifest["n_tokens"]))
            )
            subject = SummaryDerivation(summary_table(stored), summary_table(derived))
        except (OSError, SummaryError) as err:
            return f"its summary cannot be read ({err})"
        return rules.first_problem(subject)

    def _stored_summary(self, manifest: dict, full: bool = False) -> tuple[str | None, EntrySummary | None]:
        """(None, summary) when the summary file of this entry (complete, `manifest` checked) passes every
        check; (reason, None) otherwise; (None, None) when there is none. The per-document tables are
        checked when an analysis reads them, or here with `full` (`cache verify`)."""
        path, checksum = self.summary_path, self.path / checksum_name(SUMMARY_FILE)
        if not os.path.lexists(path):
            return None, None
        limit = max_summary_bytes(int(manifest["n_tokens"]))
        try:
            data = read_entry_file(path, self.path, limit)
            record = parse_json(read_entry_file(checksum, self.path, 4096), checksum.name)
        except (OSError, ValueError) as err:
            return f"its summary cannot be read ({err})", None
        problem = rules.first_problem(SummaryFile(data, record, manifest.get("summary")))
        if problem is not None:
            return problem, None
        try:
            summary = parse_summary(
                data,
                self.key,
                self.vocab_size(manifest),
                int(manifest["n_tokens"]),
                load_tokens=self.read_stats,
                reload=lambda: read_entry_file(path, self.path, limit),
            )
            if full:
                summary.load_documents()
        except (SummaryError, OSError) as err:
            return f"its summary is refused: {err}", None
        return None, summary

    def _verified_summary_files(self, manifest: dict) -> Iterator[tuple[str, bytes]]:
        """The summary of this entry and its record, (name, bytes) each, when both pass every check;
        nothing otherwise (a summary is derived data: whoever reads the entry without one derives it
        again)."""
        if not os.path.lexists(self.summary_path) or self._stored_summary(manifest, full=True)[0]:
            return
        data = self.read_file(SUMMARY_FILE, max_summary_bytes(int(manifest["n_tokens"])))
        record = self.read_file(checksum_name(SUMMARY_FILE), MAX_RECORD_BYTES)
        if parse_json(record, checksum_name(SUMMARY_FILE)).get("sha256") == sha256_hex(
            data
        ):  # the bytes checked are the bytes shared
            yield SUMMARY_FILE, data
            yield checksum_name(SUMMARY_FILE), record


def ranked_vocab_size(manifest: dict) -> int:
    """|V| the ranks were taken over, as manifest["vocab_size"] records it. A manifest without one
    (a development build before 0.1.0 wrote such entries) is refused with what to do."""
    vocab = manifest.get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        return vocab
    key = str(manifest.get("key") or "KEY")[:12]
    raise CacheError(
        f"cache entry {key}: its manifest records no vocab_size (written by a development build before "
        f"0.1.0); re-extract it: rbplab cache rm {key}, then rbplab extract the same model and corpus"
    )


def read_spec(path: Path) -> dict | None:
    """The spec of the entry directory `path`: the one of spec.json (or, failing that, of the
    manifest) that hashes to the directory name; None if neither does (or the folder is a link)."""
    for name, limit in (("spec.json", MAX_SPEC_BYTES), ("manifest.json", max_manifest_bytes(None))):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = parse_json(read_entry_file(path / name, path, limit), name)
            spec = data["spec"] if name == "manifest.json" else data
            if isinstance(spec, dict) and cache_key(spec) == path.name:
                return spec
    return None
