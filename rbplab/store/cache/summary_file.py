"""An entry's summary on disk: one parquet file beside the shards, written and checked like them.

The summary (`rbplab.core.summary.EntrySummary`) is stored as ONE parquet row of list columns
(zstd), its metadata naming the entry key, the summary version, |V| and the token count;
`parse_summary` derives again every relation the numbers must satisfy and raises `SummaryError` on
the first one broken, and the entry (`CacheEntry.summary`) then derives the summary again from
its verified shards.
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
from rbplab.core.summary import (
    DOC_RUN_KS,
    RUN_TIES,
    SUMMARY_VERSION,
    EntrySummary,
    HitRuns,
    RankPairs,
    summary_ks,
)

KEY_META = b"rbplab.entry_key"
VERSION_META = b"rbplab.summary_version"
VOCAB_META = b"rbplab.vocab_size"
TOKENS_META = b"rbplab.n_tokens"
NLL_SQ_META = b"rbplab.nll_sq_sum"  # float.hex: exact


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
            KEY_META: key.encode(),
            VERSION_META: str(SUMMARY_VERSION).encode(),
            VOCAB_META: str(summary.vocab_size).encode(),
            TOKENS_META: str(summary.n_tokens).encode(),
            NLL_SQ_META: float(summary.nll_sq_sum).hex().encode(),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", compression_level=9)
    return sink.getvalue()


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise SummaryError(what)


def _pair_hits(pairs: RankPairs, ks: np.ndarray, ties: str) -> np.ndarray:
    """Tokens ranked within each k, from the rank pairs: what every table of hits must sum to."""
    if ties == "expected":
        share = np.clip((ks[None, :] - pairs.greater[:, None]) / pairs.equal[:, None], 0.0, 1.0)
        return pairs.count @ share
    rank = pairs.greater + pairs.equal if ties == "pessimistic" else pairs.greater + 1
    order = np.argsort(rank, kind="stable")
    cumulative = np.r_[0, np.cumsum(pairs.count[order])]
    return cumulative[np.searchsorted(rank[order], ks, side="right")].astype(np.float64)


def _columns(table: pa.Table):
    def column(name: str, dtype: type = np.int64, required: bool = True) -> np.ndarray | None:
        if name not in table.column_names:
            _require(not required, f"the summary lacks {name}")
            return None
        values = table.column(name).combine_chunks()
        _require(pa.types.is_list(values.type), f"the summary's {name} is not a list")
        return np.asarray(values.values.to_numpy(zero_copy_only=False), dtype=dtype)

    return column


def _grid(column, name: str, ks: np.ndarray, totals: np.ndarray, dtype: type) -> np.ndarray | None:
    """A (rows, len(ks)) table of hits: counts between 0 and each row's tokens, never falling in k."""
    flat = column(name, dtype, required=False)
    if flat is None:
        return None
    _require(len(flat) == len(totals) * len(ks), f"the summary's {name} has the wrong shape")
    values = flat.reshape(len(totals), len(ks))
    _require(np.all(values >= 0) and np.all(values <= totals[:, None] + 1e-9), f"{name} out of range")
    _require(np.all(np.diff(values, axis=1) >= -1e-9), f"{name} falls as k grows")
    return values


def _hit_totals_match(values: np.ndarray, expected: np.ndarray, what: str) -> None:
    _require(
        np.allclose(values.sum(axis=0), expected, rtol=1e-9, atol=1e-6), f"{what} do not hold the ranks' hits"
    )


_DOCUMENT_COLUMNS = ("hits_", "doc_run_")


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
    the first rule the file breaks. Only the pooled parts are read and kept; the per-document
    tables are read again through `reload` when an analysis asks for them (the file must still
    have the bytes checked here) and checked then (default: kept from `data`)."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        names = parquet.schema_arrow.names
        pooled = [n for n in names if not n.startswith(_DOCUMENT_COLUMNS)]
        table = parquet.read(columns=pooled)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise SummaryError(f"the summary is not a readable parquet file ({err})") from None
    meta = parquet.schema_arrow.metadata or {}
    _require(meta.get(KEY_META) == key.encode(), "the summary was written for another entry")
    _require(meta.get(VERSION_META) == str(SUMMARY_VERSION).encode(), "the summary's version is not this one")
    _require(meta.get(VOCAB_META) == str(vocab_size).encode(), f"the summary's |V| is not {vocab_size}")
    _require(meta.get(TOKENS_META) == str(n_tokens).encode(), f"the summary does not hold {n_tokens} tokens")
    _require(table.num_rows == 1, "the summary must be one row")
    try:
        nll_sq = float.fromhex(meta.get(NLL_SQ_META, b"").decode())
    except ValueError:
        raise SummaryError("the summary's nll moment is unreadable") from None
    column = _columns(table)

    ks = column("ks")
    _require(
        np.array_equal(ks, summary_ks(vocab_size)), "the summary's thresholds are not the grid of its |V|"
    )
    pairs = RankPairs(
        column("pair_greater"), column("pair_equal"), column("pair_count"), column("pair_nll", float)
    )
    m = len(pairs.greater)
    _require(
        len(pairs.equal) == m and len(pairs.count) == m and len(pairs.nll_sum) == m, "pair columns differ"
    )
    if m:
        _require(
            pairs.greater.min() >= 0 and pairs.equal.min() >= 1 and pairs.count.min() >= 1, "bad pair values"
        )
        _require((pairs.greater + pairs.equal).max() <= vocab_size, "a pair's rank exceeds |V|")
    _require(int(pairs.count.sum()) == n_tokens, "the pair counts do not sum to the token count")
    doc_tokens, doc_nll, doc_p = column("doc_tokens"), column("doc_nll", float), column("doc_p", float)
    n_docs = len(doc_tokens)
    _require(len(doc_nll) == n_docs and len(doc_p) == n_docs, "document columns differ in length")
    _require(
        doc_tokens.min(initial=0) >= 0 and int(doc_tokens.sum()) == n_tokens, "bad document token counts"
    )
    seg_doc, seg_start, seg_length = column("seg_doc"), column("seg_start"), column("seg_length")
    _require(len(seg_doc) == len(seg_start) == len(seg_length), "segment columns differ in length")
    _require(seg_length.min(initial=1) >= 1 and seg_start.min(initial=0) >= 0, "bad segments")
    _require(
        seg_doc.min(initial=0) >= 0 and seg_doc.max(initial=-1) < n_docs, "a segment's document is unknown"
    )
    _require(
        np.array_equal(np.bincount(seg_doc, weights=seg_length, minlength=n_docs), doc_tokens),
        "the segments do not hold each document's tokens",
    )
    bucket_tokens = column("bucket_tokens")
    _require(int(bucket_tokens.sum()) == n_tokens and bucket_tokens.min(initial=0) >= 0, "bad bucket counts")
    tied = bool(np.any(pairs.equal > 1))
    totals = {t: _pair_hits(pairs, ks, t) for t in TIES}
    bucket_hits = {t: _grid(column, f"bucket_hits_{t}", ks, bucket_tokens, np.int64) for t in RUN_TIES}
    _require(bucket_hits["optimistic"] is not None, "the summary lacks bucket_hits_optimistic")
    _require((bucket_hits["pessimistic"] is not None) == tied, "the summary's tie conventions do not match")
    bucket_hits = {t: bucket_hits["optimistic"] if v is None else v for t, v in bucket_hits.items()}
    for ties, values in bucket_hits.items():
        _hit_totals_match(values, totals[ties], f"bucket hits ({ties})")
    runs = _read_runs(column, "run", ks, totals, n_docs, tied, per_document=False)

    # Without `reload` the bytes stay in memory for the document tables (tests, in-memory use); with
    # it, nothing of the file is kept: a study of thousands of entries holds only pooled arrays.
    kept = data if reload is None else None

    def documents() -> tuple[dict, dict]:
        fresh = kept if reload is None else reload()
        _require(hashlib.sha256(fresh).hexdigest() == digest, "the summary changed since it was opened")
        try:
            doc_table = pq.read_table(pa.BufferReader(fresh), columns=[n for n in names if n not in pooled])
        except (pa.ArrowException, OSError, ValueError) as err:
            raise SummaryError(f"the summary's document tables are unreadable ({err})") from None
        doc_column = _columns(doc_table)
        hits = {
            t: _grid(doc_column, f"hits_{t}", ks, doc_tokens, float if t == "expected" else np.int64)
            for t in TIES
        }
        _require(hits["optimistic"] is not None, "the summary lacks hits_optimistic")
        _require(
            all(v is not None for v in hits.values()) == tied, "the summary's tie conventions do not match"
        )
        hits = {t: hits["optimistic"] if v is None else v for t, v in hits.items()}
        for ties, values in hits.items():
            _hit_totals_match(values, totals[ties], f"document hits ({ties})")
        return hits, _read_runs(doc_column, "doc_run", ks, hits, n_docs, tied, per_document=True)

    return EntrySummary(
        vocab_size=vocab_size,
        n_tokens=n_tokens,
        nll_sq_sum=nll_sq,
        pairs=pairs,
        ks=ks,
        doc_tokens=doc_tokens,
        doc_nll=doc_nll,
        doc_p=doc_p,
        hits={},
        seg_doc=seg_doc,
        seg_start=seg_start,
        seg_length=seg_length,
        bucket_tokens=bucket_tokens,
        bucket_hits=bucket_hits,
        runs=runs,
        doc_runs={},
        load_tokens=load_tokens,
        load_documents=documents,
    )


def _read_runs(column, prefix: str, ks, hits, n_docs: int, tied: bool, per_document: bool) -> dict:
    """Hit-run histograms, each checked to hold exactly the hits it summarises (`hits`: per
    document tables, or for pooled runs the totals the rank pairs give)."""
    tie, k = column(f"{prefix}_tie"), column(f"{prefix}_k")
    length, count = column(f"{prefix}_length"), column(f"{prefix}_count")
    doc = column(f"{prefix}_doc") if per_document else None
    _require(len(tie) == len(k) == len(length) == len(count), f"{prefix} columns differ in length")
    _require(length.min(initial=1) >= 1 and count.min(initial=1) >= 1, f"bad {prefix} lengths or counts")
    if doc is not None:
        _require(
            len(doc) == len(tie) and doc.min(initial=0) >= 0 and doc.max(initial=-1) < n_docs, "bad run docs"
        )
    wanted = [kk for kk in ks if (kk in DOC_RUN_KS or not per_document)]
    out = {}
    for ties in RUN_TIES if tied else ("optimistic",):
        code = RUN_TIES.index(ties)
        for kk in wanted:
            rows = (tie == code) & (k == kk)
            j = int(np.searchsorted(ks, kk))
            held = length[rows] * count[rows]
            if doc is None:
                _require(held.sum() == hits[ties][j], f"{prefix} at k={kk} do not hold its hits")
                out[(ties, int(kk))] = HitRuns(length[rows], count[rows])
            else:
                per_doc = np.bincount(doc[rows], weights=held, minlength=n_docs)
                _require(
                    np.array_equal(per_doc, hits[ties][:, j]), f"{prefix} at k={kk} do not hold its hits"
                )
                out[(ties, int(kk))] = HitRuns(length[rows], count[rows], doc[rows])
    if not tied:  # no tied token: pessimistic hits are the optimistic ones, so are their runs
        out |= {("pessimistic", kk): runs for (_, kk), runs in list(out.items())}
    return out
