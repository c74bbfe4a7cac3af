"""An entry summary's tables as its rules read them: column by column, as flat arrays.

`Summary` (the pooled tables) and `SummaryDocuments` (the per-document tables), each a scope of the
cache's rule table (`rbplab.store.cache.summary_rules`), with what they derive from the columns:
the hit tables of each tie convention, the hit runs, and the hits the rank pairs imply.
`rbplab.store.cache.summary_file` builds an `EntrySummary` from them once their rules hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from rbplab.core.stats import TIES
from rbplab.core.summary import DOC_RUN_KS, RUN_TIES, HitRuns, RankPairs
from rbplab.store.cache.layout import SUMMARY_NLL_SQ_META

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
        return {ties: _pair_hits(self.pairs, self.ks, ties) for ties in TIES}

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


def _pair_hits(pairs: RankPairs, ks: np.ndarray, ties: str) -> np.ndarray:
    if ties == "expected":
        share = np.clip((ks[None, :] - pairs.greater[:, None]) / pairs.equal[:, None], 0.0, 1.0)
        return pairs.count @ share
    rank = pairs.greater + pairs.equal if ties == "pessimistic" else pairs.greater + 1
    order = np.argsort(rank, kind="stable")
    cumulative = np.r_[0, np.cumsum(pairs.count[order])]
    return cumulative[np.searchsorted(rank[order], ks, side="right")].astype(np.float64)
