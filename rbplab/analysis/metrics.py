"""RBP_k and the other per-run metrics from token statistics, with their document-bootstrap intervals.

Document-level (cluster) bootstrap of RBP_k, cross-entropy and mean target probability.

Tokens of one document are correlated (topic, style, copying), so confidence intervals
resample documents, not tokens. Per-document sufficient statistics (`DocStats`) turn each
bootstrap replicate into a weighted sum of rows: a matrix product, never a re-scan of tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.analysis.decomposition import DECOMPOSITION_METRICS, decomposition_metrics
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import (
    METRIC_COLUMNS,
    PAPER_KS,
    RUN_COLUMNS,
    EntrySummary,
    RankCounts,
    RankPairs,
    TokenStats,
    check_ties,
    document_hits,
    document_totals,
    tie_rank,
    tie_share,
)

METRICS = ("rbp", "ce", "mean_p")
# With decomposition=True the tables also hold the error-entropy terms and MRR
# (`rbplab.analysis.decomposition`), one row each, k = <NA>.
ALL_METRICS = METRICS + DECOMPOSITION_METRICS
# Statistics of one run: its tokens in memory, or the summary the cache keeps (`rbplab.core.stats`).
RunData = TokenStats | EntrySummary


def log_spaced_ks(vocab_size: int, n: int = 40) -> np.ndarray:
    """About `n` distinct integers log-spaced from 1 to `vocab_size` (both included)."""
    if vocab_size < 1:
        raise InvalidArgumentError(f"vocab_size must be >= 1, got {vocab_size}")
    return np.unique(np.round(np.geomspace(1, vocab_size, max(n, 2))).astype(np.int64))


def standard_ks(vocab_size: int, per_decade: int = 8) -> np.ndarray:
    """Default k grid: `per_decade` log-spaced values per decade plus the paper's thresholds,
    restricted to k < |V| (RBP_|V| = 1 carries no information). The grid does not depend on
    |V| otherwise, so families with slightly different vocabularies share their k values."""
    grid = np.round(10 ** np.arange(0, 7 + 1e-9, 1 / per_decade)).astype(np.int64)
    ks = np.union1d(grid, PAPER_KS)
    ks = ks[ks < vocab_size]
    return ks if len(ks) else np.array([1], dtype=np.int64)


def as_ks(ks: Iterable[int] | int | None, vocab_size: int) -> np.ndarray:
    """Sorted unique integer thresholds in [1, vocab_size]; None gives `standard_ks`."""
    if ks is None:
        return standard_ks(vocab_size)
    arr = np.atleast_1d(np.asarray(ks))
    if arr.size == 0 or not np.all(np.isfinite(arr.astype(float))) or np.any(arr != np.round(arr)):
        raise InvalidArgumentError(f"ks must be a non-empty list of integers, got {ks!r}")
    arr = np.unique(arr.astype(np.int64))
    if arr[0] < 1 or arr[-1] > vocab_size:
        raise InvalidArgumentError(
            f"every k must lie in [1, vocab_size={vocab_size}], got {arr[0]}..{arr[-1]}"
        )
    return arr


def n_tokens(data: RunData) -> int:
    return len(data) if isinstance(data, TokenStats) else data.n_tokens


def rank_pairs(data: RunData) -> RankPairs:
    """The distinct (n_greater, n_equal) pairs with counts and nll sums."""
    return data.pairs if isinstance(data, EntrySummary) else RankPairs.of(data)


def rank_histogram(data: RunData, ties: str = "pessimistic") -> np.ndarray:
    """h[r] = number of tokens with rank r, r = 0..|V| (h[0] = 0), as float64.

    Under "expected" ties a token tied with e-1 others puts 1/e on each of its e possible
    ranks, so h is the expected histogram under random tie-breaking (fractional). `ties` is checked
    by the public function that passes it (the lognormal fits, a `Study`)."""
    return RankCounts.of(rank_pairs(data), ties).histogram(data.vocab_size)


class RBPQueries:
    """RBP_k, -log RBP_k, the dense curves and a table of them, from a curve's `count_within`
    (tokens with rank <= k), `n_tokens` and `vocab_size`: what every curve of a run answers,
    whatever holds its counts (`RBPCurve`, or `IndexedRBPCurve` read from the cache index)."""

    def _index(self, k: float | np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        if np.any(~np.isfinite(k)) or np.any(k < 1) or np.any(k > self.vocab_size):
            raise InvalidArgumentError(f"k must lie in [1, vocab_size={self.vocab_size}]")
        return np.floor(k).astype(np.int64)  # RBP is a step function of k

    def rbp(self, k: float | np.ndarray) -> float | np.ndarray:
        """RBP_k (fraction of tokens ranked within the top k); scalar in, scalar out."""
        if self.n_tokens == 0:
            raise InvalidArgumentError("RBP is undefined for zero tokens")
        out = self.count_within(self._index(k)) / self.n_tokens
        return float(out) if np.ndim(out) == 0 else out

    def neg_log_rbp(self, k: float | np.ndarray) -> float | np.ndarray:
        """-log RBP_k, the quantity the relative-based scaling law fits (inf when RBP_k = 0)."""
        with np.errstate(divide="ignore"):
            return -np.log(self.rbp(k))

    @property
    def cumulative(self) -> np.ndarray:
        """Dense (expected) counts of tokens with rank <= k for k = 0..|V| (an O(|V|) array)."""
        return self.count_within(np.arange(self.vocab_size + 1))

    @property
    def histogram(self) -> np.ndarray:
        """(Expected) number of tokens at each rank r = 0..|V|."""
        return np.diff(self.cumulative, prepend=0.0)

    def to_frame(self, ks: Iterable[int] | None = None) -> pd.DataFrame:
        """Columns k, rbp, neg_log_rbp at `ks` (default: `log_spaced_ks(vocab_size)`)."""
        ks = log_spaced_ks(self.vocab_size) if ks is None else as_ks(ks, self.vocab_size)
        rbp = np.asarray(self.rbp(ks), dtype=np.float64)
        with np.errstate(divide="ignore"):
            return pd.DataFrame({"k": ks, "rbp": rbp, "neg_log_rbp": -np.log(rbp)})


@dataclass(frozen=True, eq=False)
class RBPCurve(RBPQueries):
    """RBP_k for every k of one (model, corpus): query any k in O(log m), e.g. from a slider.

    Sparse, so a study of thousands of runs at |V| = 152K holds no |V|-long array per run: the
    count of tokens with rank <= k is `rank_counts` (`rbplab.core.stats.RankCounts`: a step
    function over the m distinct ranks, plus the tied pairs' shares under "expected" ties), the
    very counts the cache index stores. `cumulative` and `histogram` give the dense arrays over
    k = 0..|V| when a figure needs them."""

    rank_counts: RankCounts
    n_tokens: int
    vocab_size: int
    ties: str

    def count_within(self, k: np.ndarray) -> np.ndarray:
        """(Expected) number of tokens with rank <= k, for integer k in 0..|V|."""
        return self.rank_counts.count_within(k)


class IndexedRBPCurve(RBPQueries):
    """RBP_k of a run whose summary is read through the cache index (an
    `rbplab.store.cache.index.IndexedSummary`, which answers `within(ks, ties)` from its row), with
    `RBPCurve`'s queries: on the summary's k grid (and at k >= |V|) from the row, the counts
    `RankCounts` gives; at any other k, and for the dense arrays, from the run's `RBPCurve`,
    computed once from the summary's rank pairs (read then) and kept, as a study of summaries
    keeps every run's curve."""

    def __init__(self, summary: EntrySummary, ties: str):
        self.summary = summary
        self.ties = ties
        self.n_tokens = summary.n_tokens
        self.vocab_size = summary.vocab_size

    @functools.cached_property
    def curve(self) -> RBPCurve:
        """The run's whole curve, from its summary's rank pairs (read on first use)."""
        return _rbp_curve(self.summary, self.ties)

    def count_within(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.int64)
        found = self.summary.within(k.ravel(), self.ties)
        return self.curve.count_within(k) if found is None else found.reshape(k.shape)

    @property
    def cumulative(self) -> np.ndarray:  # every k: the whole curve's, not |V| lookups in the row
        return self.curve.cumulative


def rbp_curve(data: RunData, ties: str = "pessimistic") -> RBPCurve:
    """RBP_k for all k = 1..|V| from the distinct ranks (one sort of the rank pairs)."""
    return _rbp_curve(data, check_ties(ties))


def rbp_curves(data: Sequence[RunData], ties: str = "pessimistic") -> list[RBPCurve]:
    """`rbp_curve` of several runs under one tie convention (checked once, even for no runs)."""
    check_ties(ties)
    return [_rbp_curve(d, ties) for d in data]


def _rbp_curve(data: RunData, ties: str) -> RBPCurve:
    return RBPCurve(RankCounts.of(rank_pairs(data), ties), n_tokens(data), data.vocab_size, ties)


def rbp(data: RunData, k: float | Iterable[int], ties: str = "pessimistic") -> float | np.ndarray:
    """RBP_k at one k (float) or several (array)."""
    return _rbp_curve(data, check_ties(ties)).rbp(np.asarray(k) if not np.isscalar(k) else k)


def cross_entropy(data: RunData) -> float:
    """Mean negative log-likelihood of the targets in nats (NaN when nll is unknown)."""
    if not n_tokens(data):
        return float("nan")
    return float(np.mean(data.nll)) if isinstance(data, TokenStats) else data.nll_sum / data.n_tokens


def mean_target_probability(data: RunData) -> float:
    """Mean probability the model gives the target token, E[p(t)]."""
    if not n_tokens(data):
        return float("nan")
    if isinstance(data, TokenStats):
        return float(np.mean(np.exp(-data.nll)))
    return float(data.doc_p.sum() / data.n_tokens)


def _metric_frame(rbp_values: np.ndarray, ks: np.ndarray, ce: float, mean_p: float) -> pd.DataFrame:
    with np.errstate(divide="ignore"):
        values = np.r_[rbp_values, ce, mean_p]
        loss = np.r_[-np.log(rbp_values), ce, -np.log(mean_p)]
    return pd.DataFrame(
        {
            "metric": ["rbp"] * len(ks) + ["ce", "mean_p"],
            "k": pd.array(list(ks) + [None, None], dtype="Int64"),
            "value": values,
            "loss": loss,
        }
    )


def run_metrics(
    data: RunData, ks: Iterable[int] | None = None, ties: str = "pessimistic", decomposition: bool = False
) -> pd.DataFrame:
    """Long table: one row per metric ("rbp" per k, "ce", "mean_p") with value and loss,
    plus n_tokens, n_docs, vocab_size and ties. decomposition=True adds the rows of
    `rbplab.analysis.decomposition.decomposition_metrics` (ee, ee_mm, sa, conf, mrr; with n_rbe)."""
    return _run_metrics(data, ks, check_ties(ties), decomposition)


def _run_metrics(data: RunData, ks: Iterable[int] | None, ties: str, decomposition: bool) -> pd.DataFrame:
    ks = as_ks(ks, data.vocab_size)
    frame = _metric_frame(
        np.asarray(_rbp_curve(data, ties).rbp(ks), dtype=np.float64),
        ks,
        cross_entropy(data),
        mean_target_probability(data),
    )
    if decomposition:
        frame = pd.concat([frame, decomposition_metrics(data, ties)], ignore_index=True)
    return frame.assign(n_tokens=n_tokens(data), n_docs=data.n_docs, vocab_size=data.vocab_size, ties=ties)


def metrics_table(
    runs: RunsLike, ks: Iterable[int] | None = None, ties: str = "pessimistic", decomposition: bool = False
) -> pd.DataFrame:
    """Tidy per-run metrics, the input of `rbplab.analysis.fit`: columns family, model, corpus, S,
    metric, k, value, loss, n_tokens, n_docs, vocab_size, ties. ks default: `standard_ks(|V|)`.
    decomposition=True adds ee, ee_mm, sa, conf and mrr rows (and an n_rbe column), which
    `scaling_fits`, `extrapolation_check` and `prediction_audit` fit like any other metric."""
    check_ties(ties)
    frames = []
    for run in as_runs(runs):
        frame = _run_metrics(run.stats, ks, ties, decomposition)
        frames.append(frame.assign(family=run.family, model=run.model, corpus=run.corpus, S=run.S))
    if not frames:
        raise InvalidArgumentError("metrics_table needs at least one run")
    table = pd.concat(frames, ignore_index=True)
    front = [*RUN_COLUMNS, *METRIC_COLUMNS]
    return table[front + [c for c in table.columns if c not in front]]


UNITS = ("document", "token")
_CHUNK_ELEMENTS = 1 << 22  # bootstrap weight block size (~32 MB of float64)


@dataclass(frozen=True, eq=False)
class DocStats:
    """Per-document sufficient statistics of one run at thresholds `ks`.

    hits[d, j] = (expected) tokens of document d with rank <= ks[j]; a bootstrap replicate with
    document weights w gives RBP = w @ hits / w @ n_tokens."""

    ks: np.ndarray
    hits: np.ndarray
    n_tokens: np.ndarray
    nll_sum: np.ndarray
    p_sum: np.ndarray
    ties: str
    vocab_size: int

    @property
    def n_docs(self) -> int:
        return len(self.n_tokens)

    def evaluate(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Metrics for document weights of shape (n_docs,) or (B, n_docs): rbp (B, n_k), ce, mean_p (B,)."""
        w = np.atleast_2d(weights)
        den = w @ self.n_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "rbp": (w @ self.hits) / den[:, None],
                "ce": (w @ self.nll_sum) / den,
                "mean_p": (w @ self.p_sum) / den,
            }


def expected_hits(stats: TokenStats, ks: np.ndarray, ties: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token membership in the top k as (j0, tied_index, tied_fraction), for the token bootstrap.

    Untied tokens are in the top ks[j] exactly for j >= j0; "expected" tied tokens
    (rows tied_index) contribute tied_fraction[i, j], their share within ks[j] (`tie_share`)."""
    ng, ne = stats.n_greater, stats.n_equal
    j0 = np.searchsorted(ks, tie_rank(ng, ne, "optimistic" if ties == "optimistic" else "pessimistic"))
    if ties != "expected" or len(ne) == 0 or ne.max() == 1:
        return j0, np.zeros(0, dtype=np.int64), np.zeros((0, len(ks)))
    tied = np.flatnonzero(ne > 1)
    j0[tied] = len(ks)  # handled fractionally below
    return j0, tied, tie_share(ng[tied, None], ne[tied, None], ks[None, :])


def _padded(values: np.ndarray, n_docs: int) -> np.ndarray:
    out = np.zeros((n_docs, *values.shape[1:]), dtype=np.float64)
    out[: len(values)] = values
    return out


def doc_stats(
    data: RunData, ks: Iterable[int] | None = None, ties: str = "pessimistic", n_docs: int | None = None
) -> DocStats:
    """Per-document sufficient statistics of a run's tokens or of its cached summary (which keeps
    them at its thresholds, `rbplab.core.stats.summary_ks`); `n_docs` pads to a corpus-wide
    document count so several models of one corpus can share bootstrap weights. `ties` is checked
    by the public function that passes it (`bootstrap_ci`, `fit.bootstrap_fits`, a `Study`)."""
    ks = as_ks(ks, data.vocab_size)
    n_docs = data.n_docs if n_docs is None else int(n_docs)
    if n_docs < data.n_docs:
        raise InvalidArgumentError(f"n_docs={n_docs} is smaller than the documents present ({data.n_docs})")
    if isinstance(data, EntrySummary):
        hits = data.doc_hits(ks, ties)
        tokens, nll, p = data.doc_tokens, data.doc_nll, data.doc_p
    else:
        hits = document_hits(data, ks, ties)
        tokens, nll, p = document_totals(data)
    return DocStats(
        ks=ks,
        hits=_padded(hits, n_docs),
        n_tokens=_padded(tokens, n_docs),
        nll_sum=_padded(nll, n_docs),
        p_sum=_padded(p, n_docs),
        ties=ties,
        vocab_size=data.vocab_size,
    )


def weight_chunks(n_units: int, n_boot: int, seed: int | np.random.SeedSequence) -> Iterator[np.ndarray]:
    """Bootstrap weights (resampling counts) in blocks of replicates, shape (b, n_units).

    Deterministic in (n_units, n_boot, seed): two calls yield identical weights, which is how
    several models of one corpus are evaluated on the same document resamples."""
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, _CHUNK_ELEMENTS // max(n_units, 1)))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        idx = rng.integers(0, n_units, size=(b, n_units)) + (np.arange(b) * n_units)[:, None]
        yield np.bincount(idx.ravel(), minlength=b * n_units).reshape(b, n_units).astype(np.float64)


def bootstrap_weights(n_units: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """All bootstrap weights at once, shape (n_boot, n_units): row b counts how often each
    document is drawn in replicate b (rows sum to n_units)."""
    return np.concatenate(list(weight_chunks(n_units, n_boot, seed)), axis=0)


def replicate_arrays(
    docstats: list[DocStats], n_boot: int, seed: int | np.random.SeedSequence = 0
) -> list[dict[str, np.ndarray]]:
    """Replicate metrics for several runs of one corpus on the SAME document resamples.
    Returns one dict per run: rbp (n_boot, n_k), ce (n_boot,), mean_p (n_boot,)."""
    if not docstats:
        return []
    n_docs = {d.n_docs for d in docstats}
    if len(n_docs) != 1:
        raise InvalidArgumentError(
            f"shared resampling needs one document count, got {sorted(n_docs)}; pass n_docs="
        )
    parts: list[list[dict[str, np.ndarray]]] = [[] for _ in docstats]
    for w in weight_chunks(n_docs.pop(), n_boot, seed):
        for part, d in zip(parts, docstats, strict=True):
            part.append(d.evaluate(w))
    return [{key: np.concatenate([p[key] for p in part]) for key in part[0]} for part in parts]


def _token_replicates(stats: TokenStats, ks: np.ndarray, ties: str, n_boot: int, seed: int) -> dict:
    """Naive token bootstrap (each token its own cluster), O(n_tokens) per replicate; kept to
    show how much it understates uncertainty next to the document bootstrap."""
    n, n_k = len(stats), len(ks)
    j0, tied, frac = expected_hits(stats, ks, ties)
    p = np.exp(-stats.nll)
    out = {"rbp": np.empty((n_boot, n_k)), "ce": np.empty(n_boot), "mean_p": np.empty(n_boot)}
    rng = np.random.default_rng(seed)
    for b in range(n_boot):
        w = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)
        hits = np.cumsum(np.bincount(j0, weights=w, minlength=n_k + 1))[:n_k] + w[tied] @ frac
        out["rbp"][b] = hits / n
        out["ce"][b] = np.einsum("i,i->", w, stats.nll) / n  # einsum: no BLAS threads on 1-D sums
        out["mean_p"][b] = np.einsum("i,i->", w, p) / n
    return out


def _replicates(data: RunData, ks: np.ndarray, ties: str, n_boot: int, seed: int, unit: str) -> dict:
    if unit not in UNITS:
        raise InvalidArgumentError(f"unit must be one of {UNITS}, got {unit!r}")
    if n_boot < 2 or n_tokens(data) == 0:
        raise InvalidArgumentError(
            f"need n_boot >= 2 and at least one token (n_boot={n_boot}, tokens={n_tokens(data)})"
        )
    if unit == "document":
        return replicate_arrays([doc_stats(data, ks, ties)], n_boot, seed)[0]
    if not isinstance(data, TokenStats):
        raise InvalidArgumentError(
            "the token bootstrap resamples tokens: give the run's TokenStats (study.stats(...))"
        )
    return _token_replicates(data, ks, ties, n_boot, seed)


def _columns(arrays: dict[str, np.ndarray], ks: np.ndarray) -> tuple[list[str], list, np.ndarray]:
    """Flatten replicate arrays to (metric, k, value matrix (B, n_k + 2)) in the long layout."""
    values = np.column_stack([arrays["rbp"], arrays["ce"], arrays["mean_p"]])
    return ["rbp"] * len(ks) + ["ce", "mean_p"], list(ks) + [None, None], values


def bootstrap_ci(
    stats: RunData,
    ks: Iterable[int] | None = (1, 10, 100),
    ties: str = "pessimistic",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    unit: str = "document",
) -> pd.DataFrame:
    """Point estimate, bootstrap standard error and percentile interval per metric and k:
    columns metric, k, estimate, se, estimate_low, estimate_high, n_boot, unit. Intervals for the loss
    follow by the monotone map loss = -log(value) (CE: loss = value)."""
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    ks = as_ks(ks, stats.vocab_size)
    point = run_metrics(stats, ks, ties)  # checks `ties` before any resampling
    metric, k, values = _columns(_replicates(stats, ks, ties, n_boot, seed, unit), ks)
    low, high = np.nanquantile(values, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return pd.DataFrame(
        {
            "metric": metric,
            "k": pd.array(k, dtype="Int64"),
            "estimate": point["value"].to_numpy(),
            "se": np.nanstd(values, axis=0, ddof=1),
            "estimate_low": low,
            "estimate_high": high,
            "n_boot": n_boot,
            "unit": unit,
        }
    )
