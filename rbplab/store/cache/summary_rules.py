"""The rules of a cache entry's summary (`SUMMARY_RULES`): its file (`SummaryFile`: its bytes
against its records), its pooled tables (`Summary`) and per-document tables (`SummaryDocuments`),
read column by column as flat arrays with what they derive (the hit tables of each tie convention,
the hit runs, the hits the rank pairs imply), and the summary against the one its verified shards
give (`SummaryDerivation`: verify, repair and import). Parsing the summary's parquet is the
entry's job (`rbplab.store.cache.reading`, which builds an `EntrySummary` once the rules hold);
the rules only judge what was read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from rbplab.core.stats import (
    DOC_RUN_KS,
    RUN_TIES,
    SUMMARY_VERSION,
    TIES,
    HitRuns,
    RankCounts,
    RankPairs,
    summary_ks,
    tie_rank,
)
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    SUMMARY_NLL_SQ_META,
    SUMMARY_TOKENS_META,
    SUMMARY_VERSION_META,
    SUMMARY_VOCAB_META,
    sha256_hex,
)
from rbplab.store.cache.rule import Rule

# The summary's columns read in groups, and those of floats (the others are int64).
PAIR_COLUMNS = ("pair_greater", "pair_equal", "pair_count", "pair_nll")
DOCUMENT_COLUMNS = ("doc_tokens", "doc_nll", "doc_p")
SEGMENT_COLUMNS = ("seg_doc", "seg_start", "seg_length")
_FLOAT_COLUMNS = frozenset({"pair_nll", "doc_nll", "doc_p", "hits_expected"})


class SummaryTables:
    """What the two summary scopes share: a parquet table of one row of list columns, read column
    by column as flat arrays; the hit tables it holds (one per tie convention, a row per bucket or
    document and a column per k of `ks`) and the hit-run histograms that summarise them."""

    table: pa.Table
    ks: np.ndarray
    tied: bool  # some token is tied: each convention has its own tables
    row_tokens: np.ndarray  # the tokens of each row of a hit table
    hit_columns: dict[str, str]  # tie convention -> the column of its hit table
    hit_label: str
    run_prefix: str
    run_ks: list[int]  # the thresholds that have hit runs
    run_hits: dict[str, np.ndarray]  # what the runs hold: per document, or pooled from the rank pairs
    pair_hits: dict[str, np.ndarray]  # what every hit table sums to (`Summary.pair_hits`)
    per_document: bool

    def lacks(self, name: str) -> str | None:
        """Why column `name` cannot be read as a list, None when it can."""
        if name not in self.table.column_names:
            return f"the summary lacks {name}"
        if not pa.types.is_list(self.table.column(name).type):
            return f"the summary's {name} is not a list"
        return None

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        return {}

    def column(self, name: str) -> np.ndarray:
        """List column `name` as one flat array (read once)."""
        if name not in self._arrays:
            values = self.table.column(name).combine_chunks().values.to_numpy(zero_copy_only=False)
            self._arrays[name] = np.asarray(values, dtype=np.float64 if name in _FLOAT_COLUMNS else np.int64)
        return self._arrays[name]

    @cached_property
    def hit_tables(self) -> dict[str, np.ndarray | None]:
        """Each convention's hit table as stored (rows, len(ks)); None where the file has none."""
        shape = (len(self.row_tokens), len(self.ks))
        return {
            ties: self.column(name).reshape(shape) if name in self.table.column_names else None
            for ties, name in self.hit_columns.items()
        }

    @cached_property
    def hits(self) -> dict[str, np.ndarray]:
        """Every convention's hit table, the optimistic one standing in for those the file omits
        (no token is tied, so they hold the same numbers)."""
        optimistic = self.hit_tables["optimistic"]
        return {ties: optimistic if table is None else table for ties, table in self.hit_tables.items()}

    @property
    def run_columns(self) -> tuple[str, ...]:
        fields = ("tie", "k", "length", "count") + (("doc",) if self.per_document else ())
        return tuple(f"{self.run_prefix}_{field}" for field in fields)

    @cached_property
    def runs(self) -> dict[tuple[str, int], HitRuns]:
        """(ties, k) -> the hit runs stored for it; without a tied token the pessimistic runs are
        the optimistic ones."""
        tie, k, length, count, *doc = (self.column(name) for name in self.run_columns)
        out = {}
        for ties in RUN_TIES if self.tied else ("optimistic",):
            for kk in self.run_ks:
                rows = (tie == RUN_TIES.index(ties)) & (k == kk)
                out[(ties, kk)] = HitRuns(length[rows], count[rows], *(d[rows] for d in doc))
        if not self.tied:
            out |= {("pessimistic", kk): runs for (_, kk), runs in list(out.items())}
        return out


@dataclass(frozen=True, eq=False)
class Summary(SummaryTables):
    """A summary file's pooled tables as read (`table`: every column but the per-document ones;
    `meta`: its parquet schema metadata), against the entry it was read for: its key, |V| and token
    count (from the entry's spec and verified manifest)."""

    table: pa.Table
    meta: dict[bytes, bytes]
    key: str
    vocab_size: int
    n_tokens: int

    hit_label = "bucket hits"
    run_prefix = "run"
    per_document = False

    @property
    def hit_columns(self) -> dict[str, str]:
        return {ties: f"bucket_hits_{ties}" for ties in RUN_TIES}

    @cached_property
    def nll_sq_sum(self) -> float | None:
        try:
            return float.fromhex(self.meta.get(SUMMARY_NLL_SQ_META, b"").decode())
        except ValueError:
            return None

    @property
    def ks(self) -> np.ndarray:
        return self.column("ks")

    @cached_property
    def pairs(self) -> RankPairs:
        return RankPairs(*(self.column(name) for name in PAIR_COLUMNS))

    @cached_property
    def tied(self) -> bool:
        return bool(np.any(self.pairs.equal > 1))

    @cached_property
    def pair_hits(self) -> dict[str, np.ndarray]:
        """Tokens ranked within each k under each convention, from the rank pairs: what every
        table of hits must sum to."""
        return {ties: RankCounts.of(self.pairs, ties).count_within(self.ks) for ties in TIES}

    @property
    def row_tokens(self) -> np.ndarray:
        return self.column("bucket_tokens")

    @property
    def run_ks(self) -> list[int]:
        return [int(k) for k in self.ks]

    @property
    def run_hits(self) -> dict[str, np.ndarray]:
        return self.pair_hits


@dataclass(frozen=True, eq=False)
class SummaryDocuments(SummaryTables):
    """A summary file's per-document tables as read (`table`), against its pooled tables (`pooled`,
    checked)."""

    table: pa.Table
    pooled: Summary

    hit_label = "document hits"
    run_prefix = "doc_run"
    per_document = True

    @property
    def hit_columns(self) -> dict[str, str]:
        return {ties: f"hits_{ties}" for ties in TIES}

    @property
    def ks(self) -> np.ndarray:
        return self.pooled.ks

    @property
    def tied(self) -> bool:
        return self.pooled.tied

    @property
    def row_tokens(self) -> np.ndarray:
        return self.pooled.column("doc_tokens")

    @property
    def pair_hits(self) -> dict[str, np.ndarray]:
        return self.pooled.pair_hits

    @property
    def run_ks(self) -> list[int]:
        return [int(k) for k in self.ks if k in DOC_RUN_KS]

    @property
    def run_hits(self) -> dict[str, np.ndarray]:
        return self.hits


@dataclass(frozen=True)
class SummaryFile:
    """The summary's bytes, its .sha256 record and what the manifest lists for it."""

    data: bytes
    record: Any
    listed: Any


@dataclass(frozen=True)
class SummaryDerivation:
    """A stored summary (whose own rules hold) and the summary its verified shards give now, each
    read whole (`summary_file.summary_table`): checked by `rbplab cache verify`, `cache repair` and
    `cache import`, which read every shard anyway, never by a plain read."""

    stored: pa.Table
    derived: pa.Table


# ---------------------------------------------------------------------------------------------
# The checks


def _summary_checksum(s: SummaryFile) -> Iterator[str]:
    if not isinstance(s.record, dict) or s.record.get("sha256") != sha256_hex(s.data):
        yield "its summary failed its checksum"


def _summary_listed(s: SummaryFile) -> Iterator[str]:
    if isinstance(s.listed, dict) and s.listed.get("sha256") != s.record["sha256"]:
        yield "its summary is not the one the manifest records"


def _summary_key(s: Summary) -> Iterator[str]:
    if s.meta.get(ENTRY_KEY_META) != s.key.encode():
        yield "the summary was written for another entry"


def _summary_version(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_VERSION_META) != str(SUMMARY_VERSION).encode():
        yield "the summary's version is not this one"


def _summary_vocab(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_VOCAB_META) != str(s.vocab_size).encode():
        yield f"the summary's |V| is not {s.vocab_size}"


def _summary_tokens(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_TOKENS_META) != str(s.n_tokens).encode():
        yield f"the summary does not hold {s.n_tokens} tokens"


def _summary_one_row(s: Summary) -> Iterator[str]:
    if s.table.num_rows != 1:
        yield "the summary must be one row"


def _summary_nll_moment(s: Summary) -> Iterator[str]:
    if s.nll_sq_sum is None:
        yield "the summary's nll moment is unreadable"


def _has(*names: str) -> Callable[[SummaryTables], Iterator[str]]:
    """The check that columns `names` are there as lists (each read, in this order)."""

    def check(s: SummaryTables) -> Iterator[str]:
        for name in names:
            problem = s.lacks(name)
            if problem is not None:
                yield problem
                return
            s.column(name)

    return check


def _thresholds(s: Summary) -> Iterator[str]:
    if not np.array_equal(s.ks, summary_ks(s.vocab_size)):
        yield "the summary's thresholds are not the grid of its |V|"


def _pair_values(s: Summary) -> Iterator[str]:
    p = s.pairs
    if len(p.greater) and not (p.greater.min() >= 0 and p.equal.min() >= 1 and p.count.min() >= 1):
        yield "bad pair values"


def _pair_ranks(s: Summary) -> Iterator[str]:
    if len(s.pairs.greater) and tie_rank(s.pairs.greater, s.pairs.equal, "pessimistic").max() > s.vocab_size:
        yield "a pair's rank exceeds |V|"


def _pair_counts_sum(s: Summary) -> Iterator[str]:
    if int(s.pairs.count.sum()) != s.n_tokens:
        yield "the pair counts do not sum to the token count"


def _same_lengths(names: tuple[str, ...], problem: str) -> Callable[[Summary], Iterator[str]]:
    """The check that columns `names` are of one length."""

    def check(s: Summary) -> Iterator[str]:
        if len({len(s.column(name)) for name in names}) != 1:
            yield problem

    return check


_PAIR_LENGTHS = _same_lengths(PAIR_COLUMNS, "pair columns differ")
_DOCUMENT_LENGTHS = _same_lengths(DOCUMENT_COLUMNS, "document columns differ in length")
_SEGMENT_LENGTHS = _same_lengths(SEGMENT_COLUMNS, "segment columns differ in length")


def _document_tokens(s: Summary) -> Iterator[str]:
    tokens = s.column("doc_tokens")
    if not (tokens.min(initial=0) >= 0 and int(tokens.sum()) == s.n_tokens):
        yield "bad document token counts"


def _segment_values(s: Summary) -> Iterator[str]:
    if not (s.column("seg_length").min(initial=1) >= 1 and s.column("seg_start").min(initial=0) >= 0):
        yield "bad segments"


def _segment_documents(s: Summary) -> Iterator[str]:
    doc = s.column("seg_doc")
    if not (doc.min(initial=0) >= 0 and doc.max(initial=-1) < len(s.column("doc_tokens"))):
        yield "a segment's document is unknown"


def _segments_hold_documents(s: Summary) -> Iterator[str]:
    tokens = s.column("doc_tokens")
    held = np.bincount(s.column("seg_doc"), weights=s.column("seg_length"), minlength=len(tokens))
    if not np.array_equal(held, tokens):
        yield "the segments do not hold each document's tokens"


def _bucket_tokens(s: Summary) -> Iterator[str]:
    tokens = s.column("bucket_tokens")
    if not (int(tokens.sum()) == s.n_tokens and tokens.min(initial=0) >= 0):
        yield "bad bucket counts"


def _stored_hit_columns(s: SummaryTables) -> list[str]:
    return [name for name in s.hit_columns.values() if name in s.table.column_names]


def _hit_lists(s: SummaryTables) -> Iterator[str]:
    for name in _stored_hit_columns(s):
        problem = s.lacks(name)
        if problem is not None:
            yield problem
            return


def _hit_shapes(s: SummaryTables) -> Iterator[str]:
    for name in _stored_hit_columns(s):
        if len(s.column(name)) != len(s.row_tokens) * len(s.ks):
            yield f"the summary's {name} has the wrong shape"
            return


def _hit_range(s: SummaryTables) -> Iterator[str]:
    bound = s.row_tokens[:, None] + 1e-9
    for values, name in zip(s.hit_tables.values(), s.hit_columns.values(), strict=True):
        if values is not None and not (np.all(values >= 0) and np.all(values <= bound)):
            yield f"{name} out of range"
            return


def _hits_rise_with_k(s: SummaryTables) -> Iterator[str]:
    for values, name in zip(s.hit_tables.values(), s.hit_columns.values(), strict=True):
        if values is not None and not np.all(np.diff(values, axis=1) >= -1e-9):
            yield f"{name} falls as k grows"
            return


def _optimistic_hits(s: SummaryTables) -> Iterator[str]:
    if s.hit_tables["optimistic"] is None:
        yield f"the summary lacks {s.hit_columns['optimistic']}"


def _hit_conventions(s: SummaryTables) -> Iterator[str]:
    if all(table is not None for table in s.hit_tables.values()) != s.tied:
        yield "the summary's tie conventions do not match"


def _hits_hold_pair_hits(s: SummaryTables) -> Iterator[str]:
    for ties, values in s.hits.items():
        if not np.allclose(values.sum(axis=0), s.pair_hits[ties], rtol=1e-9, atol=1e-6):
            yield f"{s.hit_label} ({ties}) do not hold the ranks' hits"
            return


def _run_columns(s: SummaryTables) -> Iterator[str]:
    yield from _has(*s.run_columns)(s)


def _run_lengths(s: SummaryTables) -> Iterator[str]:
    if len({len(s.column(name)) for name in s.run_columns[:4]}) != 1:
        yield f"{s.run_prefix} columns differ in length"


def _run_values(s: SummaryTables) -> Iterator[str]:
    length, count = s.column(f"{s.run_prefix}_length"), s.column(f"{s.run_prefix}_count")
    if not (length.min(initial=1) >= 1 and count.min(initial=1) >= 1):
        yield f"bad {s.run_prefix} lengths or counts"


def _run_documents(s: SummaryDocuments) -> Iterator[str]:
    doc, tie = s.column("doc_run_doc"), s.column("doc_run_tie")
    if not (len(doc) == len(tie) and doc.min(initial=0) >= 0 and doc.max(initial=-1) < len(s.row_tokens)):
        yield "bad run docs"


def _runs_hold_hits(s: SummaryTables) -> Iterator[str]:
    for (ties, k), runs in s.runs.items():
        if ties == "pessimistic" and not s.tied:
            continue  # the optimistic runs, checked as such
        j = int(np.searchsorted(s.ks, k))
        held = runs.length * runs.count
        if runs.doc is None:
            holds = held.sum() == s.run_hits[ties][j]
        else:
            per_doc = np.bincount(runs.doc, weights=held, minlength=len(s.row_tokens))
            holds = np.array_equal(per_doc, s.run_hits[ties][:, j])
        if not holds:
            yield f"{s.run_prefix} at k={k} do not hold its hits"
            return


# Floats derived again on another machine may differ in their last bits (a BLAS dot product); a
# summary of other tokens differs by far more.
_DERIVED_RTOL = 1e-9


def _flat(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type):
        column = column.values
    return column.to_numpy(zero_copy_only=False)


def _summary_derived(s: SummaryDerivation) -> Iterator[str]:
    what = "its summary is not the one its shards give"
    stored, derived = s.stored, s.derived
    if stored.num_rows != derived.num_rows or set(stored.column_names) != set(derived.column_names):
        yield f"{what} (other columns)"
        return
    for name in derived.column_names:
        a, b = _flat(stored, name), _flat(derived, name)
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            same = a.shape == b.shape and np.allclose(a, b, rtol=_DERIVED_RTOL, atol=0.0)
        else:
            same = np.array_equal(a, b)
        if not same:
            yield f"{what} ({name} differs)"
            return
    moments = [(t.schema.metadata or {}).get(SUMMARY_NLL_SQ_META, b"") for t in (stored, derived)]
    try:
        a, b = (float.fromhex(m.decode()) for m in moments)
    except ValueError:
        a, b = 0.0, 1.0  # unreadable: differs
    if not np.isclose(a, b, rtol=_DERIVED_RTOL, atol=0.0):
        yield f"{what} (its nll moment differs)"


# ---------------------------------------------------------------------------------------------
# The rows

SUMMARY_RULES: tuple[Rule, ...] = (
    Rule("summary matches its checksum", SummaryFile, _summary_checksum, final=True),
    Rule("summary is the manifest's", SummaryFile, _summary_listed, final=True),
    # A summary's pooled tables, checked as it is opened. It is refused on the first rule it breaks,
    # so every rule of its two scopes is final.
    Rule("summary names this entry", Summary, _summary_key, final=True),
    Rule("summary version is this one", Summary, _summary_version, final=True),
    Rule("summary |V| is the entry's", Summary, _summary_vocab, final=True),
    Rule("summary holds the entry's tokens", Summary, _summary_tokens, final=True),
    Rule("summary is one row", Summary, _summary_one_row, final=True),
    Rule("nll moment is readable", Summary, _summary_nll_moment, final=True),
    Rule("ks is there", Summary, _has("ks"), final=True),
    Rule("ks is the grid of |V|", Summary, _thresholds, final=True),
    Rule("rank-pair columns are there", Summary, _has(*PAIR_COLUMNS), final=True),
    Rule("rank-pair columns are of one length", Summary, _PAIR_LENGTHS, final=True),
    Rule("rank pairs are in range", Summary, _pair_values, final=True),
    Rule("no rank beyond |V|", Summary, _pair_ranks, final=True),
    Rule("pair counts sum to the tokens", Summary, _pair_counts_sum, final=True),
    Rule("document columns are there", Summary, _has(*DOCUMENT_COLUMNS), final=True),
    Rule("document columns are of one length", Summary, _DOCUMENT_LENGTHS, final=True),
    Rule("document tokens sum to the tokens", Summary, _document_tokens, final=True),
    Rule("segment columns are there", Summary, _has(*SEGMENT_COLUMNS), final=True),
    Rule("segment columns are of one length", Summary, _SEGMENT_LENGTHS, final=True),
    Rule("segments have a start and a length", Summary, _segment_values, final=True),
    Rule("segments name known documents", Summary, _segment_documents, final=True),
    Rule("segments hold each document's tokens", Summary, _segments_hold_documents, final=True),
    Rule("bucket_tokens is there", Summary, _has("bucket_tokens"), final=True),
    Rule("bucket tokens sum to the tokens", Summary, _bucket_tokens, final=True),
    Rule("hit tables are lists", Summary, _hit_lists, final=True),
    Rule("hit tables have a row per bucket and a column per k", Summary, _hit_shapes, final=True),
    Rule("hits lie within their bucket's tokens", Summary, _hit_range, final=True),
    Rule("hits never fall as k grows", Summary, _hits_rise_with_k, final=True),
    Rule("the optimistic hit table is there", Summary, _optimistic_hits, final=True),
    Rule("hit tables follow the tie conventions", Summary, _hit_conventions, final=True),
    Rule("hits sum to the rank pairs' hits", Summary, _hits_hold_pair_hits, final=True),
    Rule("hit-run columns are there", Summary, _run_columns, final=True),
    Rule("hit-run columns are of one length", Summary, _run_lengths, final=True),
    Rule("hit-run lengths and counts are positive", Summary, _run_values, final=True),
    Rule("hit runs hold the hits", Summary, _runs_hold_hits, final=True),
    # The per-document tables, checked when an analysis first reads them.
    Rule("hit tables are lists", SummaryDocuments, _hit_lists, final=True),
    Rule("hit tables have a row per document and a column per k", SummaryDocuments, _hit_shapes, final=True),
    Rule("hits lie within their document's tokens", SummaryDocuments, _hit_range, final=True),
    Rule("hits never fall as k grows", SummaryDocuments, _hits_rise_with_k, final=True),
    Rule("the optimistic hit table is there", SummaryDocuments, _optimistic_hits, final=True),
    Rule("hit tables follow the tie conventions", SummaryDocuments, _hit_conventions, final=True),
    Rule("hits sum to the rank pairs' hits", SummaryDocuments, _hits_hold_pair_hits, final=True),
    Rule("hit-run columns are there", SummaryDocuments, _run_columns, final=True),
    Rule("hit-run columns are of one length", SummaryDocuments, _run_lengths, final=True),
    Rule("hit-run lengths and counts are positive", SummaryDocuments, _run_values, final=True),
    Rule("hit runs name known documents", SummaryDocuments, _run_documents, final=True),
    Rule("hit runs hold the hits", SummaryDocuments, _runs_hold_hits, final=True),
    # The summary against the tokens of its verified shards (read whole: verify, repair, import).
    Rule("summary is the one its shards give", SummaryDerivation, _summary_derived, final=True),
)
