"""RBP_k for every k, cross-entropy and tidy per-run metric tables.

RBP_k = Pr(R <= k) is the CDF of the target's rank R, so one histogram of ranks
(`np.bincount`) and one cumulative sum give RBP_k for all k = 1..|V| at once.

Tie conventions (see `rbplab.core.stats.TokenStats.rank`): with g = n_greater and e = n_equal,
"pessimistic" uses R = g + e (the paper's definition, eq. 3: the number of tokens scored at
least as high as the target), "optimistic" R = g + 1 (ties broken in the target's favour, what
the common `(logits > logits[target]).sum() + 1` computes; the paper does not say which
convention its released code uses, and that code, linked anonymously in its footnote 1, was
not available to check), and "expected" averages over uniform random tie-breaking: the
target is equally likely to take any rank in g+1..g+e, so its contribution to RBP_k is
exactly clip((k - g) / e, 0, 1). That is a histogram where a tied token puts 1/e on each of
its e ranks, built with a difference array in O(n + |V|).

Confidence intervals (document bootstrap) live in `rbplab.analysis.bootstrap`.

Tidy tables use a long "metric" format: one row per (run, metric, k) with `value` (RBP_k, CE
in nats, or mean target probability) and `loss` (the positive quantity scaling laws fit:
-log RBP_k, CE, -log mean p). `k` is a nullable integer, <NA> for metrics without k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rbplab.analysis.decomposition import DECOMPOSITION_METRICS, decomposition_metrics
from rbplab.core.columns import METRIC_COLUMNS, RUN_COLUMNS
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import TokenStats, check_ties
from rbplab.core.summary import PAPER_KS, EntrySummary, RankPairs

METRICS = ("rbp", "ce", "mean_p")
# With decomposition=True the tables also hold the error-entropy terms and MRR
# (`rbplab.analysis.decomposition`), one row each, k = <NA>.
ALL_METRICS = METRICS + DECOMPOSITION_METRICS
# Statistics of one run: its tokens in memory, or the summary the cache keeps (`rbplab.core.summary`).
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
    size = data.vocab_size + 1
    pairs = rank_pairs(data)
    g, e, count = pairs.greater, pairs.equal, pairs.count.astype(np.float64)
    # bincount of empty weights returns integers: every result is cast to float64
    if ties == "pessimistic":
        return np.bincount(g + e, weights=count, minlength=size).astype(np.float64)
    if ties == "optimistic" or not np.any(e > 1):
        return np.bincount(g + 1, weights=count, minlength=size).astype(np.float64)
    tied = e > 1
    hist = np.bincount(g[~tied] + 1, weights=count[~tied], minlength=size).astype(np.float64)
    w = count[tied] / e[tied]
    # Difference array: +1/e per token at rank g+1, -1/e after rank g+e; its cumsum is the tied pmf.
    diff = np.bincount(g[tied] + 1, weights=w, minlength=size + 1)
    diff -= np.bincount(g[tied] + e[tied] + 1, weights=w, minlength=size + 1)
    hist += np.cumsum(diff)[:size]
    return hist


@dataclass(frozen=True, eq=False)
class RBPCurve:
    """RBP_k for every k of one (model, corpus): query any k in O(log m), e.g. from a slider.

    Sparse, so a study of thousands of runs at |V| = 152K holds no |V|-long array per run: the
    cumulative count of tokens with rank <= k is a step function over the m distinct ranks
    (`ranks`, `counts`: tokens at each), plus, under "expected" ties, each tied pair's share
    count * clip((k - g) / e, 0, 1) (`tied_greater`, `tied_equal`, `tied_count`). `cumulative`
    and `histogram` give the dense arrays over k = 0..|V| when a figure needs them."""

    ranks: np.ndarray
    counts: np.ndarray
    n_tokens: int
    vocab_size: int
    ties: str
    tied_greater: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tied_equal: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tied_count: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        # _steps[i]: tokens at the first i distinct ranks (a leading 0 for k below every rank)
        object.__setattr__(self, "_steps", np.r_[0.0, np.cumsum(self.counts, dtype=np.float64)])

    def _index(self, k: float | np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        if np.any(~np.isfinite(k)) or np.any(k < 1) or np.any(k > self.vocab_size):
            raise InvalidArgumentError(f"k must lie in [1, vocab_size={self.vocab_size}]")
        return np.floor(k).astype(np.int64)  # RBP is a step function of k

    def count_within(self, k: np.ndarray) -> np.ndarray:
        """(Expected) number of tokens with rank <= k, for integer k in 0..|V|."""
        k = np.asarray(k, dtype=np.int64)
        out = self._steps[np.searchsorted(self.ranks, k, side="right")]
        if len(self.tied_count):
            share = np.clip((k[..., None] - self.tied_greater) / self.tied_equal, 0.0, 1.0)
            out = out + share @ self.tied_count
        return out

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


def rbp_curve(data: RunData, ties: str = "pessimistic") -> RBPCurve:
    """RBP_k for all k = 1..|V| from the distinct ranks (one sort of the rank pairs)."""
    return _rbp_curve(data, check_ties(ties))


def rbp_curves(data: Sequence[RunData], ties: str = "pessimistic") -> list[RBPCurve]:
    """`rbp_curve` of several runs under one tie convention (checked once, even for no runs)."""
    check_ties(ties)
    return [_rbp_curve(d, ties) for d in data]


def _rbp_curve(data: RunData, ties: str) -> RBPCurve:
    pairs = rank_pairs(data)
    g, e, count = pairs.greater, pairs.equal, pairs.count
    tied = (e > 1) if ties == "expected" else np.zeros(len(g), dtype=bool)
    rank = g + e if ties == "pessimistic" else g + 1
    ranks, inverse = np.unique(rank[~tied], return_inverse=True)
    counts = np.bincount(inverse, weights=count[~tied], minlength=len(ranks))
    return RBPCurve(
        ranks.astype(np.int64),
        counts,
        n_tokens(data),
        data.vocab_size,
        ties,
        g[tied],
        e[tied],
        count[tied].astype(np.float64),
    )


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
