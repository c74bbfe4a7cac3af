"""An entry's summary on disk: one parquet file beside the shards, written and checked like them.

The summary (`rbplab.core.summary.EntrySummary`) is stored as ONE parquet row of list columns
(zstd), its metadata naming the entry key, the summary version, |V| and the token count.
`parse_summary` reads it back and judges it by the rules of `rbplab.store.cache.verify` (every
relation the numbers must satisfy, derived again): `SummaryError` names the first one broken, and
the entry (`CacheEntry.summary`) then derives the summary again from its verified shards.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.core.errors import RbplabError
from rbplab.core.stats import TIES, TokenStats
from rbplab.core.summary import RUN_TIES, SUMMARY_VERSION, EntrySummary, HitRuns
from rbplab.store.cache import verify
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    SUMMARY_NLL_SQ_META,
    SUMMARY_TOKENS_META,
    SUMMARY_VERSION_META,
    SUMMARY_VOCAB_META,
)
from rbplab.store.cache.summary_tables import Summary, SummaryDocuments


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
    problem = verify.first_problem(subject)
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
    the first rule the file breaks (`rbplab.store.cache.verify`, scopes `Summary` and
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
