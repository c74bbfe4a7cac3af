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

Confidence intervals (document bootstrap) live in `rbplab.analysis.metrics`.

Tidy tables use a long "metric" format: one row per (run, metric, k) with `value` (RBP_k, CE
in nats, or mean target probability) and `loss` (the positive quantity scaling laws fit:
-log RBP_k, CE, -log mean p). `k` is a nullable integer, <NA> for metrics without k.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import METRIC_COLUMNS, RUN_COLUMNS, TokenStats, check_ties

METRICS = ("rbp", "ce", "mean_p")
# Paper thresholds (sections 4.1-4.3) on top of the log grid, so figures can be reproduced.
PAPER_KS = (1, 10, 50, 100, 20_000, 30_000)


def log_spaced_ks(vocab_size: int, n: int = 40) -> np.ndarray:
    """About `n` distinct integers log-spaced from 1 to `vocab_size` (both included)."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
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
        raise ValueError(f"ks must be a non-empty list of integers, got {ks!r}")
    arr = np.unique(arr.astype(np.int64))
    if arr[0] < 1 or arr[-1] > vocab_size:
        raise ValueError(f"every k must lie in [1, vocab_size={vocab_size}], got {arr[0]}..{arr[-1]}")
    return arr


def rank_histogram(stats: TokenStats, ties: str = "pessimistic") -> np.ndarray:
    """h[r] = number of tokens with rank r, r = 0..|V| (h[0] = 0), as float64.

    Under "expected" ties a token tied with e-1 others puts 1/e on each of its e possible
    ranks, so h is the expected histogram under random tie-breaking (fractional)."""
    check_ties(ties)
    size = stats.vocab_size + 1
    ng, ne = stats.n_greater, stats.n_equal
    if ties == "pessimistic":
        return np.bincount(ng + ne, minlength=size).astype(np.float64)
    hist = np.zeros(size, dtype=np.float64)
    if ties == "optimistic" or len(ne) == 0 or ne.max() == 1:
        hist[1:] = np.bincount(ng, minlength=size - 1)[: size - 1]
        return hist
    tied = ne > 1
    hist[1:] = np.bincount(ng[~tied], minlength=size - 1)[: size - 1]
    g, e = ng[tied], ne[tied]
    w = 1.0 / e
    # Difference array: +1/e at rank g+1, -1/e after rank g+e; its cumsum is the tied tokens' pmf.
    diff = np.bincount(g + 1, weights=w, minlength=size + 1)
    diff -= np.bincount(g + e + 1, weights=w, minlength=size + 1)
    hist += np.cumsum(diff)[:size]
    return hist


@dataclass(frozen=True, eq=False)
class RBPCurve:
    """RBP_k for every k of one (model, corpus): query any k in O(1), e.g. from a slider.

    `cumulative[k]` is the (expected) number of tokens with rank <= k for k = 0..|V|."""

    cumulative: np.ndarray
    n_tokens: int
    vocab_size: int
    ties: str

    def _index(self, k: float | np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        if np.any(~np.isfinite(k)) or np.any(k < 1) or np.any(k > self.vocab_size):
            raise ValueError(f"k must lie in [1, vocab_size={self.vocab_size}]")
        return np.floor(k).astype(np.int64)  # RBP is a step function of k

    def rbp(self, k: float | np.ndarray) -> float | np.ndarray:
        """RBP_k (fraction of tokens ranked within the top k); scalar in, scalar out."""
        if self.n_tokens == 0:
            raise ValueError("RBP is undefined for zero tokens")
        if isinstance(k, (int, np.integer)) and 1 <= k <= self.vocab_size:  # slider fast path
            return float(self.cumulative[k] / self.n_tokens)
        out = self.cumulative[self._index(k)] / self.n_tokens
        return float(out) if np.ndim(out) == 0 else out

    def neg_log_rbp(self, k: float | np.ndarray) -> float | np.ndarray:
        """-log RBP_k, the quantity the relative-based scaling law fits (inf when RBP_k = 0)."""
        with np.errstate(divide="ignore"):
            return -np.log(self.rbp(k))

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


def rbp_curve(stats: TokenStats, ties: str = "pessimistic") -> RBPCurve:
    """RBP_k for all k = 1..|V| from one bincount and one cumsum."""
    return RBPCurve(np.cumsum(rank_histogram(stats, ties)), len(stats), stats.vocab_size, ties)


def rbp(stats: TokenStats, k: float | Iterable[int], ties: str = "pessimistic") -> float | np.ndarray:
    """RBP_k at one k (float) or several (array)."""
    return rbp_curve(stats, ties).rbp(np.asarray(k) if not np.isscalar(k) else k)


def cross_entropy(stats: TokenStats) -> float:
    """Mean negative log-likelihood of the targets in nats (NaN when nll is unknown)."""
    return float(np.mean(stats.nll)) if len(stats) else float("nan")


def mean_target_probability(stats: TokenStats) -> float:
    """Mean probability the model gives the target token, E[p(t)]."""
    return float(np.mean(np.exp(-stats.nll))) if len(stats) else float("nan")


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
    stats: TokenStats, ks: Iterable[int] | None = None, ties: str = "pessimistic"
) -> pd.DataFrame:
    """Long table: one row per metric ("rbp" per k, "ce", "mean_p") with value and loss,
    plus n_tokens, n_docs, vocab_size and ties."""
    ks = as_ks(ks, stats.vocab_size)
    frame = _metric_frame(
        np.asarray(rbp_curve(stats, ties).rbp(ks), dtype=np.float64),
        ks,
        cross_entropy(stats),
        mean_target_probability(stats),
    )
    return frame.assign(n_tokens=len(stats), n_docs=stats.n_docs, vocab_size=stats.vocab_size, ties=ties)


def metrics_table(runs: RunsLike, ks: Iterable[int] | None = None, ties: str = "pessimistic") -> pd.DataFrame:
    """Tidy per-run metrics, the input of `rbplab.analysis.fit`: columns family, model, corpus, S,
    metric, k, value, loss, n_tokens, n_docs, vocab_size, ties. ks default: `standard_ks(|V|)`."""
    frames = []
    for run in as_runs(runs):
        frame = run_metrics(run.stats, ks, ties)
        frames.append(frame.assign(family=run.family, model=run.model, corpus=run.corpus, S=run.S))
    if not frames:
        raise ValueError("metrics_table needs at least one run")
    table = pd.concat(frames, ignore_index=True)
    front = [*RUN_COLUMNS, *METRIC_COLUMNS]
    return table[front + [c for c in table.columns if c not in front]]
