"""Error-entropy decomposition of cross-entropy (arXiv 2510.04067) and mean reciprocal rank.

The rank-based error of a token is RBE = the number of vocabulary tokens scored above the target
(0 when the target ranks first). With p_e = Pr(RBE = e), Q_e = the geometric mean of the target
probability over tokens with RBE = e, C = sum_e Q_e and q_e = Q_e / C, cross-entropy splits exactly:

    CE = EE + SA - Conf,   EE = -sum p_e log p_e    (error entropy),
                           SA = sum p_e log(p_e/q_e) (self-alignment, a KL divergence, >= 0),
                           Conf = log C             (confidence).

Proof: EE + SA - Conf = -sum p_e log q_e - log C = -sum p_e log Q_e = mean of -log p(target).

Tie conventions (g = n_greater, e = n_equal; the rank by `rbplab.core.stats.tie_rank`): RBE is
the rank minus one ("pessimistic" g + e - 1, "optimistic" g), "expected" spreads each tied token
uniformly over g..g+e-1 with weight 1/e (its count and its -log p alike), so p_e and Q_e are
expectations over random tie-breaking and the identity still holds exactly (each token's weights
sum to one).

Sample-size caveat: EE estimates an entropy and is biased low by about (m - 1) / 2N for m
observed RBE values among N tokens; `ee_miller_madow` adds that correction. SA and Conf sum over
the RBE values the corpus happens to observe, so they grow with N: compare them at equal token
counts only (every table here reports n_tokens and n_rbe beside them).

MRR, the mean of 1/rank, is one more reduction of the rank distribution; under "expected" ties a
token's reciprocal rank is averaged over ranks g+1..g+e: (H_{g+e} - H_g) / e (harmonic numbers,
via digamma).

Everything is computed from the rank pairs of `rbplab.core.stats` (distinct (g, e) with token
count and nll sum), so a cached summary suffices: no token is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import special

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.stats import EntrySummary, RankPairs, TokenStats, check_ties, tie_rank

# Metrics of this module in the long layout of `rbplab.analysis.metrics.metrics_table`.
DECOMPOSITION_METRICS = ("ee", "ee_mm", "sa", "conf", "mrr")


def _pairs(data: TokenStats | EntrySummary) -> RankPairs:
    return data.pairs if isinstance(data, EntrySummary) else RankPairs.of(data)


@dataclass(frozen=True, eq=False)
class RBETable:
    """The observed RBE values with their (expected) token counts and nll sums."""

    rbe: np.ndarray  # int64, sorted
    count: np.ndarray  # float64 > 0 (fractional under "expected" ties)
    nll_sum: np.ndarray  # float64
    ties: str

    @property
    def n_tokens(self) -> float:
        return float(self.count.sum())


def rbe_table(data: TokenStats | EntrySummary, ties: str = "pessimistic") -> RBETable:
    """RBE distribution of one run under a tie convention (module docstring); `ties` is checked by
    the public function that passes it."""
    pairs = _pairs(data)
    g, e, count, nll = pairs.greater, pairs.equal, pairs.count.astype(np.float64), pairs.nll_sum
    tied = e > 1
    if ties != "expected" or not tied.any():
        rbe = tie_rank(g, e, "pessimistic" if ties == "pessimistic" else "optimistic") - 1  # untied: equal
        values, inverse = np.unique(rbe, return_inverse=True)
        return RBETable(
            values.astype(np.int64),
            np.bincount(inverse, weights=count, minlength=len(values)),
            np.bincount(inverse, weights=nll, minlength=len(values)),
            ties,
        )
    # Spread each tied pair over g..g+e-1 with difference arrays (O(n_pairs + |V|), never e rows
    # per token). The support comes from an integer coverage count, so float cancellation in the
    # cumulative sums cannot invent or drop an RBE value.
    size = int(data.vocab_size) + 1
    untied = ~tied
    cnt = np.bincount(g[untied], weights=count[untied], minlength=size)
    nls = np.bincount(g[untied], weights=nll[untied], minlength=size)
    present = np.bincount(g[untied], minlength=size) > 0
    gt, et = g[tied], e[tied]
    for target, weights in ((cnt, count[tied] / et), (nls, nll[tied] / et)):
        diff = np.bincount(gt, weights=weights, minlength=size + 1)
        diff -= np.bincount(gt + et, weights=weights, minlength=size + 1)
        target += np.cumsum(diff)[:size]
    cover = np.bincount(gt, minlength=size + 1) - np.bincount(gt + et, minlength=size + 1)
    present |= np.cumsum(cover)[:size] > 0
    values = np.flatnonzero(present)
    return RBETable(values.astype(np.int64), cnt[values], nls[values], ties)


@dataclass(frozen=True)
class Decomposition:
    """CE = ee + sa - conf for one run (nats); `ee_miller_madow` is the bias-corrected EE,
    n_rbe the number of distinct RBE values observed among n_tokens tokens."""

    ce: float
    ee: float
    ee_miller_madow: float
    sa: float
    conf: float
    n_tokens: int
    n_rbe: int
    ties: str

    @property
    def residual(self) -> float:
        """ce - (ee + sa - conf): zero up to rounding (the identity is exact)."""
        return self.ce - (self.ee + self.sa - self.conf)


def decompose(data: TokenStats | EntrySummary, ties: str = "pessimistic") -> Decomposition:
    """The error-entropy decomposition of one run's cross-entropy (module docstring)."""
    return _decompose(data, check_ties(ties))


def _decompose(data: TokenStats | EntrySummary, ties: str) -> Decomposition:
    table = rbe_table(data, ties)
    n = table.n_tokens
    if n <= 0:
        raise InvalidArgumentError("the decomposition needs at least one token")
    p = table.count / n
    log_p = np.log(p)
    log_q_unnorm = -table.nll_sum / table.count  # log Q_e
    conf = float(special.logsumexp(log_q_unnorm))  # log C, without overflow or underflow
    log_q = log_q_unnorm - conf
    ee = float(-np.sum(p * log_p))
    m = len(table.rbe)
    return Decomposition(
        ce=float(table.nll_sum.sum() / n),
        ee=ee,
        ee_miller_madow=ee + (m - 1) / (2 * n),
        sa=float(np.sum(p * (log_p - log_q))),
        conf=conf,
        n_tokens=int(round(n)),
        n_rbe=m,
        ties=ties,
    )


def mean_reciprocal_rank(data: TokenStats | EntrySummary, ties: str = "pessimistic") -> float:
    """MRR = mean of 1 / rank of the target (rank 1 = top), under a tie convention."""
    return _mean_reciprocal_rank(data, check_ties(ties))


def reciprocal_rank(greater: np.ndarray, equal: np.ndarray, ties: str) -> np.ndarray:
    """Each token's 1 / rank under `ties` (`rbplab.core.stats.tie_rank`); under "expected" ties its
    mean over the ranks g+1..g+e, (H_{g+e} - H_g) / e, exact for an untied token."""
    g, e = np.asarray(greater, dtype=np.float64), np.asarray(equal, dtype=np.float64)
    if ties != "expected":
        return 1.0 / tie_rank(g, e, ties)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = (special.digamma(g + e + 1) - special.digamma(g + 1)) / e
    return np.where(e == 1, 1.0 / tie_rank(g, e, "optimistic"), spread)


def _mean_reciprocal_rank(data: TokenStats | EntrySummary, ties: str) -> float:
    pairs = _pairs(data)
    reciprocal = reciprocal_rank(pairs.greater, pairs.equal, ties)
    count = pairs.count.astype(np.float64)
    total = count.sum()
    if total <= 0:
        raise InvalidArgumentError("MRR needs at least one token")
    return float(count @ reciprocal / total)


def decomposition_metrics(data: TokenStats | EntrySummary, ties: str = "pessimistic") -> pd.DataFrame:
    """The long rows of `rbplab.analysis.metrics.run_metrics` for ee, ee_mm, sa, conf and mrr:
    metric, k (<NA>), value, loss (the quantity a power law fits: the value itself for the
    entropy terms, -log MRR for mrr), n_rbe. Conf = log C may be negative, and a power-law fit
    then says why it has no exponent (the loss must be positive). `metrics.run_metrics` checks `ties`."""
    d = _decompose(data, ties)
    mrr = _mean_reciprocal_rank(data, ties)
    values = np.array([d.ee, d.ee_miller_madow, d.sa, d.conf, mrr])
    loss = values.copy()
    loss[-1] = -np.log(mrr)
    return pd.DataFrame(
        {
            "metric": list(DECOMPOSITION_METRICS),
            "k": pd.array([None] * len(values), dtype="Int64"),
            "value": values,
            "loss": loss,
            "n_rbe": d.n_rbe,
        }
    )


def decomposition_row(data: TokenStats | EntrySummary, ties: str = "pessimistic") -> dict:
    """One run's decomposition and MRR as a flat dict (the columns of
    `rbplab.study.decomposition.table`, which checks `ties`)."""
    d = asdict(_decompose(data, ties))
    d["ee_mm"] = d.pop("ee_miller_madow")
    d["mrr"] = _mean_reciprocal_rank(data, ties)
    return d
