"""Intervals for the lognormal's mu and sigma: a bootstrap over documents.

Tokens are correlated within documents, so the observed-information standard errors of
`fit_lognormal` (which treat ~10^6 tokens as independent) are far too narrow. Documents are the
independent units; resampling them needs each document's rank distribution, which a cached
entry keeps on its summary's k grid (`rbplab.core.summary.summary_ks`: hits at 8 thresholds per
decade), not rank by rank. So each replicate is fitted by the same discretised, truncated
lognormal on the grid's cells (ranks 1..k_1, k_1+1..k_2, ..., k_m+1..|V|), and the interval is
the percentile interval of the replicates' *deviations* from that binned fit on all documents,
added to the exact fit's estimate (`fit_lognormal` on every rank):

    [mu_hat + q_lo(mu*_b - mu_bin), mu_hat + q_hi(mu*_b - mu_bin)]

The binned and exact estimators differ by little (the grid is fine in log-rank), and their
sampling spread is what the documents' resampling measures. Coverage near nominal is checked on
synthetic documents of known mu and sigma in the tests.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import optimize, special

from rbplab.analysis._cells import LOG_SQRT_2PI, dot, log_cell
from rbplab.analysis.bootstrap import bootstrap_weights, doc_stats
from rbplab.analysis.lognormal import fit_lognormal
from rbplab.analysis.metrics import rank_histogram
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import TokenStats
from rbplab.core.summary import EntrySummary, summary_ks

PARAMETERS = ("mu", "sigma", "mu_over_sigma")


def grid_cells(data: TokenStats | EntrySummary, ties: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first rank, last rank, counts per document) of the grid's cells: counts[d, j] tokens of
    document d whose rank lies in cell j (fractional under expected ties)."""
    ks = np.asarray(data.ks if isinstance(data, EntrySummary) else summary_ks(data.vocab_size), np.int64)
    docs = doc_stats(data, ks, ties)
    cumulative = np.column_stack([docs.hits, docs.n_tokens.astype(np.float64)])
    counts = np.diff(cumulative, axis=1, prepend=0.0)
    first = np.r_[1, ks + 1]
    last = np.r_[ks, data.vocab_size]
    return first, last, counts


def fit_binned_lognormal(
    first: np.ndarray, last: np.ndarray, counts: np.ndarray, vocab_size: int, start: tuple[float, float]
) -> tuple[float, float]:
    """MLE (mu, sigma) of the discretised lognormal truncated to [1/2, |V| + 1/2) from counts of
    ranks in cells [first_j, last_j], started at `start`."""
    keep = counts > 0
    lo_edge, hi_edge = np.log(first[keep] - 0.5), np.log(last[keep] + 0.5)
    c = counts[keep]
    n = c.sum()
    lo_all, hi_all = np.log(0.5), np.log(vocab_size + 0.5)

    def nll_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        mu, sigma = theta[0], np.exp(theta[1])
        a = np.r_[(lo_edge - mu) / sigma, (lo_all - mu) / sigma]
        b = np.r_[(hi_edge - mu) / sigma, (hi_all - mu) / sigma]
        logd = log_cell(a, b, special.log_ndtr)
        fa = np.exp(-0.5 * a**2 - LOG_SQRT_2PI - logd)
        fb = np.exp(-0.5 * b**2 - LOG_SQRT_2PI - logd)
        w = np.r_[c, -n] / n
        d_mu = -(fb - fa) / sigma
        d_logsigma = -(b * fb - a * fa)
        return -dot(w, logd), -np.array([dot(w, d_mu), dot(w, d_logsigma)])

    res = optimize.minimize(nll_and_grad, [start[0], np.log(start[1])], jac=True, method="BFGS")
    return float(res.x[0]), float(np.exp(res.x[1]))


def lognormal_interval(
    data: TokenStats | EntrySummary,
    ties: str = "pessimistic",
    level: float = 0.95,
    n_boot: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """mu, sigma, mu_over_sigma of `fit_lognormal` with document-bootstrap intervals
    (`<name>_low`, `<name>_high`; see the module docstring), and n_docs."""
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    if n_boot < 2:
        raise InvalidArgumentError(f"n_boot must be at least 2, got {n_boot}")
    exact = fit_lognormal(rank_histogram(data, ties)).params
    mu_hat, sigma_hat = exact["mu"], exact["sigma"]
    first, last, counts = grid_cells(data, ties)
    binned = fit_binned_lognormal(first, last, counts.sum(axis=0), data.vocab_size, (mu_hat, sigma_hat))
    weights = bootstrap_weights(counts.shape[0], n_boot, seed)
    replicates = np.array(
        [fit_binned_lognormal(first, last, w @ counts, data.vocab_size, binned) for w in weights]
    )
    shifts = {
        "mu": replicates[:, 0] - binned[0],
        "sigma": replicates[:, 1] - binned[1],
        "mu_over_sigma": replicates[:, 0] / replicates[:, 1] - binned[0] / binned[1],
    }
    values = {"mu": mu_hat, "sigma": sigma_hat, "mu_over_sigma": mu_hat / sigma_hat}
    tail = (1 - level) / 2
    out: dict[str, float] = {"n_docs": float(counts.shape[0])}
    for name in PARAMETERS:
        low, high = np.quantile(shifts[name], [tail, 1 - tail])
        out |= {
            name: values[name],
            f"{name}_low": values[name] + low,
            f"{name}_high": values[name] + high,
        }
    return out


def lognormal_intervals(
    runs: RunsLike, ties: str = "pessimistic", level: float = 0.95, n_boot: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Per run: family, model, corpus, S, mu, sigma, mu_over_sigma, each with its document-
    bootstrap interval (`lognormal_interval`), and n_docs."""
    rows = []
    for run in as_runs(runs):
        result = lognormal_interval(run.stats, ties, level, n_boot, seed)
        rows.append({"family": run.family, "model": run.model, "corpus": run.corpus, "S": run.S} | result)
    return pd.DataFrame(rows)
