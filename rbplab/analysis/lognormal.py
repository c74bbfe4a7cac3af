"""The lognormal model of the rank distribution: its fit, its bootstrap, and the theory that
relates RBP_k to cross-entropy through it.

Rank cells of a discretised log-rank distribution, shared by the fits and the theory.

Rank r occupies the cell [r - 1/2, r + 1/2] of the continuous rank, so its probability is a
difference of CDF values at the cell's log-edges.

Intervals for the lognormal's mu and sigma: a bootstrap over documents.

Tokens are correlated within documents, so the observed-information standard errors of
`fit_lognormal` (which treat ~10^6 tokens as independent) are far too narrow. Documents are the
independent units; resampling them needs each document's rank distribution, which a cached
entry keeps on its summary's k grid (`rbplab.core.stats.summary_ks`: hits at 8 thresholds per
decade), not rank by rank. So each replicate is fitted by the same discretised, truncated
lognormal on the grid's cells (ranks 1..k_1, k_1+1..k_2, ..., k_m+1..|V|), and the interval is
the percentile interval of the replicates' *deviations* from that binned fit on all documents,
added to the exact fit's estimate (`fit_lognormal` on every rank):

    [mu_hat + q_lo(mu*_b - mu_bin), mu_hat + q_hi(mu*_b - mu_bin)]

The binned and exact estimators differ by little (the grid is fine in log-rank), and their
sampling spread is what the documents' resampling measures. Coverage near nominal is checked on
synthetic documents of known mu and sigma in the tests.

Lognormal theory of ranks (paper appendix B) and its scaling with model size S.

Appendix B reads p_k as the probability that the target has rank k, so -log p_1 is -log
RBP_1 and its "CE" is the entropy of the rank distribution, -sum_k p_k log p_k: the mean nll
of a calibrated model whose rank-k token carries probability p_k, not the measured
cross-entropy. The columns say so (rank_entropy_*); `lognormal_table` puts them next to the
measured mean nll (ce) because the paper compares the two.

Each prediction uses parameters fitted to its own model: the *_discrete columns the
discretised truncated lognormal of `rbplab.analysis.lognormal.fit_lognormal` (mu, sigma),
the *_sum and *_closed columns appendix B's p_k = psi(k) / sum_j psi(j) fitted by
`rbplab.analysis.lognormal.fit_psi_lognormal` (mu_psi, sigma_psi). The two fits differ on the
same ranks, and feeding one model's parameters into the other's formulas mixes two models.
The discretised, truncated rank model and its fits are above in this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize, special

from rbplab.analysis.fit import fit_power_law
from rbplab.analysis.metrics import RBPCurve, bootstrap_weights, cross_entropy, doc_stats, rank_histogram
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import EntrySummary, TokenStats, check_ties, summary_ks

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum's own loop, not BLAS: multithreaded BLAS ddot is slow on busy machines, and these
    # vectors (<= |V|) are too short for threads to pay off.
    return float(np.einsum("i,i->", a, b))


def log_cell(a: np.ndarray, b: np.ndarray, logcdf) -> np.ndarray:
    """log(F(b) - F(a)) for a < b without cancellation: in the upper tail use survival
    functions (F symmetric, so S(t) = F(-t))."""
    upper = a > 0
    hi = np.where(upper, logcdf(-a), logcdf(b))
    lo = np.where(upper, logcdf(-b), logcdf(a))
    with np.errstate(divide="ignore"):
        return hi + np.log(-np.expm1(lo - hi))


def cell_edges(ranks: np.ndarray, mu: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    r = ranks.astype(np.float64)
    return (np.log(r - 0.5) - mu) / sigma, (np.log(r + 0.5) - mu) / sigma


# What a rank distribution can be fitted from: tokens, their summary, a curve or a histogram.
RankData = TokenStats | EntrySummary | RBPCurve | np.ndarray

DISTRIBUTIONS = ("lognormal", "loglogistic", "power_law")

# Symmetric standard distributions of the log-rank: (log CDF, log density).
_STANDARD = {
    "lognormal": (special.log_ndtr, lambda t: -0.5 * t**2 - LOG_SQRT_2PI),
    "loglogistic": (special.log_expit, lambda t: special.log_expit(t) + special.log_expit(-t)),
}


def log_pmf(distribution: str, params: dict[str, float], vocab_size: int) -> np.ndarray:
    """log P(R = r) for r = 1..|V| of a fitted distribution (see module docstring)."""
    r = np.arange(1, vocab_size + 1)
    if distribution == "power_law":
        logw = -params["s"] * np.log(r)
        return logw - special.logsumexp(logw)
    if distribution == "psi_lognormal":  # appendix B: the density at the integers, normalised
        logw = -np.log(r) - (np.log(r) - params["mu"]) ** 2 / (2 * params["sigma"] ** 2)
        return logw - special.logsumexp(logw)
    logcdf = _STANDARD[distribution][0]
    loc, scale = _loc_scale(distribution, params)
    a, b = cell_edges(r, loc, scale)
    return log_cell(a, b, logcdf) - log_cell(a[:1], b[-1:], logcdf)[0]


def _loc_scale(distribution: str, params: dict[str, float]) -> tuple[float, float]:
    return (params["mu"], params["sigma"]) if distribution == "lognormal" else (params["m"], params["scale"])


def lognormal_pmf(mu: float, sigma: float, vocab_size: int) -> np.ndarray:
    """P(R = r), r = 1..|V| (index r - 1), of the discretised truncated lognormal."""
    return np.exp(log_pmf("lognormal", {"mu": mu, "sigma": sigma}, vocab_size))


def sample_lognormal_ranks(mu: float, sigma: float, vocab_size: int, size: int, seed: int = 0) -> np.ndarray:
    """Integer ranks drawn from the discretised truncated lognormal (inverse CDF)."""
    cdf = np.cumsum(lognormal_pmf(mu, sigma, vocab_size))
    u = np.random.default_rng(seed).random(size) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right") + 1, vocab_size)


@dataclass(frozen=True, eq=False)
class RankDistributionFit:
    """Maximum-likelihood fit of one distribution to a rank histogram."""

    distribution: str
    params: dict[str, float] = field(repr=True)
    loglik: float
    n_tokens: float
    vocab_size: int
    converged: bool
    # Standard errors from the observed information, treating tokens as independent: a lower
    # bound under within-document correlation (use a document bootstrap for honest intervals).
    params_se: dict[str, float] = field(default_factory=dict)

    @property
    def loglik_per_token(self) -> float:
        return self.loglik / self.n_tokens

    def pmf(self) -> np.ndarray:
        """P(R = r) for r = 1..|V| (index r - 1)."""
        return np.exp(log_pmf(self.distribution, self.params, self.vocab_size))


def _histogram(data: RankData, ties: str) -> tuple[np.ndarray, int]:
    if isinstance(data, (TokenStats, EntrySummary)):  # every fit's one way in: `ties` checked here
        hist = rank_histogram(data, check_ties(ties))
    elif isinstance(data, RBPCurve):
        hist = data.histogram
    else:
        hist = np.asarray(data, dtype=np.float64)
        if hist.ndim != 1 or len(hist) < 2 or hist[0] != 0 or np.any(hist < 0):
            raise InvalidArgumentError(
                "a rank histogram must be 1-D, h[r] >= 0 for r = 0..|V|, with h[0] = 0"
            )
    if hist.sum() <= 0:
        raise InvalidArgumentError("the rank histogram is empty")
    return hist, len(hist) - 1


def _fit_location_scale(distribution: str, hist: np.ndarray, vocab_size: int) -> RankDistributionFit:
    logcdf, logpdf = _STANDARD[distribution]
    ranks = np.flatnonzero(hist)
    counts = hist[ranks]
    n = counts.sum()
    bounds_r = np.array([1, vocab_size])

    def nll_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        loc, scale = theta[0], np.exp(theta[1])
        a, b = cell_edges(ranks, loc, scale)
        lo, hi = cell_edges(bounds_r, loc, scale)
        a, b = np.r_[a, lo[0]], np.r_[b, hi[1]]  # last cell: the truncation normaliser
        logd = log_cell(a, b, logcdf)
        fa, fb = np.exp(logpdf(a) - logd), np.exp(logpdf(b) - logd)
        d_loc = -(fb - fa) / scale  # d log(F(b) - F(a)) / d loc
        d_logscale = -(b * fb - a * fa)  # d / d log(scale)
        w = np.r_[counts, -n] / n
        return -dot(w, logd), -np.array([dot(w, d_loc), dot(w, d_logscale)])

    logr = np.log(ranks)
    m0 = dot(counts, logr) / n
    s0 = max(float(np.sqrt(dot(counts, (logr - m0) ** 2) / n)), 0.3)
    if distribution == "loglogistic":
        s0 *= np.sqrt(3) / np.pi  # logistic scale with the same standard deviation
    best = None
    for start in ((m0, s0), (m0 - 2 * s0, 2 * s0), (0.0, 1.0)):  # the truncated likelihood can be flat
        res = optimize.minimize(nll_and_grad, [start[0], np.log(start[1])], jac=True, method="BFGS")
        if best is None or res.fun < best.fun:
            best = res
    names = ("mu", "sigma") if distribution == "lognormal" else ("m", "scale")
    params = {names[0]: float(best.x[0]), names[1]: float(np.exp(best.x[1]))}
    h = 1e-5  # Hessian of the per-token nll by central differences of the analytic gradient
    steps = np.eye(2) * h
    hess = np.array([(nll_and_grad(best.x + d)[1] - nll_and_grad(best.x - d)[1]) / (2 * h) for d in steps])
    cov = np.linalg.pinv((hess + hess.T) / 2) / n
    se = {names[0]: float(np.sqrt(cov[0, 0])), names[1]: float(params[names[1]] * np.sqrt(cov[1, 1]))}
    loglik = float(-best.fun * n)
    return RankDistributionFit(distribution, params, loglik, float(n), vocab_size, bool(best.success), se)


def fit_lognormal(data: RankData, ties: str = "pessimistic") -> RankDistributionFit:
    """MLE of the discretised truncated lognormal (params mu, sigma of the log-rank) from
    TokenStats, an RBPCurve, or a rank histogram h[r], r = 0..|V|."""
    hist, vocab = _histogram(data, ties)
    return _fit_location_scale("lognormal", hist, vocab)


def fit_rank_power_law(data: RankData, ties: str = "pessimistic") -> RankDistributionFit:
    """MLE of the truncated discrete power law P(R = r) = r^-s / sum_{j<=|V|} j^-s (param s)."""
    hist, vocab = _histogram(data, ties)
    n = hist.sum()
    logr = np.log(np.arange(1, vocab + 1))
    mean_logr = dot(hist[1:], logr) / n

    def nll(s: float) -> float:
        return s * mean_logr + special.logsumexp(-s * logr)

    res = optimize.minimize_scalar(nll, bounds=(-5.0, 20.0), method="bounded")
    h = 1e-4
    curv = (nll(res.x + h) - 2 * nll(res.x) + nll(res.x - h)) / h**2
    se = {"s": float(1 / np.sqrt(curv * n)) if curv > 0 else float("nan")}
    loglik = float(-res.fun * n)
    return RankDistributionFit(
        "power_law", {"s": float(res.x)}, loglik, float(n), vocab, bool(res.success), se
    )


def fit_psi_lognormal(data: RankData, ties: str = "pessimistic") -> RankDistributionFit:
    """MLE of appendix B's own model, P(R = k) = psi(k) / sum_{j<=|V|} psi(j) with the lognormal
    density psi evaluated at the integers (eq. 10, truncated at |V|), params mu and sigma.

    This is not the discretised model of `fit_lognormal` (cells [k - 1/2, k + 1/2)): for the
    same ranks the two give different (mu, sigma), and the appendix's formulas are only
    consistent with parameters fitted to the appendix's model. No standard errors."""
    hist, vocab = _histogram(data, ties)
    ranks = np.flatnonzero(hist)
    w = hist[ranks] / hist.sum()
    log_r, log_all = np.log(ranks.astype(np.float64)), np.log(np.arange(1, vocab + 1, dtype=np.float64))

    def nll(theta: np.ndarray) -> float:
        mu, sigma = theta[0], np.exp(theta[1])

        def log_psi(x: np.ndarray) -> np.ndarray:
            return -x - (x - mu) ** 2 / (2 * sigma**2)

        return -dot(w, log_psi(log_r)) + float(special.logsumexp(log_psi(log_all)))

    m0 = dot(w, log_r)
    s0 = max(float(np.sqrt(dot(w, (log_r - m0) ** 2))), 0.3)
    best = None
    for start in ((m0, s0), (m0 - 2 * s0, 2 * s0), (0.0, 1.0)):
        res = optimize.minimize(
            nll,
            [start[0], np.log(start[1])],
            method="Nelder-Mead",
            options={"xatol": 1e-8, "fatol": 1e-13, "maxiter": 4000},
        )
        if best is None or res.fun < best.fun:
            best = res
    params = {"mu": float(best.x[0]), "sigma": float(np.exp(best.x[1]))}
    n = float(hist.sum())
    loglik = float(-best.fun * n)  # -log(sqrt(2 pi) sigma) cancels in the normalised pmf
    return RankDistributionFit("psi_lognormal", params, loglik, n, vocab, bool(best.success))


def compare_rank_distributions(data: RankData, ties: str = "pessimistic") -> pd.DataFrame:
    """Fit lognormal, log-logistic and power law; one row per distribution with its
    parameters (mu, sigma, m, scale, s; NaN where not applicable), loglik, loglik_per_token,
    llr_per_token_vs_lognormal (< 0: the lognormal fits better), max_cdf_error = max_k
    |F_model(k) - RBP_k|, p1_model (its P(R = 1)) and converged."""
    hist, vocab = _histogram(data, ties)
    ecdf = np.cumsum(hist[1:]) / hist.sum()
    fits = [
        _fit_location_scale("lognormal", hist, vocab),
        _fit_location_scale("loglogistic", hist, vocab),
        fit_rank_power_law(hist),
    ]
    rows = []
    for f in fits:
        pmf = f.pmf()
        rows.append(
            {"distribution": f.distribution}
            | f.params
            | {"loglik": f.loglik, "loglik_per_token": f.loglik_per_token}
            | {"llr_per_token_vs_lognormal": (f.loglik - fits[0].loglik) / f.n_tokens}
            | {"max_cdf_error": float(np.max(np.abs(np.cumsum(pmf) - ecdf))), "p1_model": float(pmf[0])}
            | {"converged": f.converged, "n_tokens": f.n_tokens}
        )
    return pd.DataFrame(rows).reindex(
        columns=["distribution", "mu", "sigma", "m", "scale", "s", "loglik", "loglik_per_token"]
        + ["llr_per_token_vs_lognormal", "max_cdf_error", "p1_model", "converged", "n_tokens"]
    )


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


_HEAD = 1 << 14  # exact terms of infinite sums; the rest is an analytic tail (midpoint rule)


def _entropy_p1(logw_head: np.ndarray, tail_mass: float, tail_ent: float) -> tuple[float, float]:
    """-log p_1 and entropy of p_k = w_k / c given log-weights of the head and the tail's
    sum w and sum w(-log w)."""
    w = np.exp(logw_head)
    c = w.sum() + tail_mass
    ent_sum = -dot(w, logw_head) + tail_ent
    return float(np.log(c) - logw_head[0]), float(np.log(c) + ent_sum / c)


def _lognormal_tail(mu: float, sigma: float, start: float) -> tuple[float, float]:
    """Integrals over x > start of psi and psi * (-log psi) for the lognormal density psi."""
    z = (np.log(start) - mu) / sigma
    q, phi = special.ndtr(-z), np.exp(-0.5 * z**2 - LOG_SQRT_2PI)
    i1 = mu * q + sigma * phi  # int psi ln x
    i2 = sigma**2 * (q + z * phi)  # int psi (ln x - mu)^2
    return float(q), float((LOG_SQRT_2PI + np.log(sigma)) * q + i1 + i2 / (2 * sigma**2))


def _closed_forms(m: float, s: float, vocab_size: int | None) -> tuple[float, float]:
    """Eq. 16 and eq. 18 with the integrals over [1, |V|] (to infinity without vocab_size):
    c = psi(1)/2 + P, P = int psi, I_1 = int psi ln x, I_2 = int psi ln^2 x."""
    a = -m / s
    b = (np.log(vocab_size) - m) / s if vocab_size else np.inf
    phi_a = np.exp(-0.5 * a**2 - LOG_SQRT_2PI)
    phi_b = np.exp(-0.5 * b**2 - LOG_SQRT_2PI) if np.isfinite(b) else 0.0
    big_p = special.ndtr(b) - special.ndtr(a) if np.isfinite(b) else special.ndtr(m / s)
    i1 = m * big_p + s * (phi_a - phi_b)
    b_phi_b = b * phi_b if np.isfinite(b) else 0.0
    i2 = (m**2 + s**2) * big_p + 2 * m * s * (phi_a - phi_b) + s**2 * (a * phi_a - b_phi_b)
    c = 0.5 * phi_a / s + big_p
    base = LOG_SQRT_2PI + np.log(s) + np.log(c)
    return base + m**2 / (2 * s**2), base + ((i2 - 2 * m * i1 + m**2 * c) / (2 * s**2) + i1) / c


def appendix_b(
    mu: float | Iterable[float], sigma: float | Iterable[float], vocab_size: int | None = None
) -> pd.DataFrame:
    """Appendix-B predictions of -log p_1 (= -log RBP_1) and of the rank entropy
    -sum_k p_k log p_k (the appendix's "CE"; see the module docstring) from (mu, sigma):

    *_closed              the paper's closed forms, eq. 16 and eq. 18/21 (integrals for sums,
                          c ~ psi(1)/2 + P, eq. 20), with the integrals truncated at |V| when
                          vocab_size is given, like the sums;
    *_closed_untruncated  the paper's formulas exactly as printed (integrals to infinity);
    *_sum                 exact sums for the appendix's model p_k = psi(k) / sum_j psi(j);
    *_discrete            exact values for the fitted discretised model (cells [r - 1/2, r + 1/2)).
    Sums run over k = 1..|V| when vocab_size is given, else to infinity (2^14 exact terms plus
    the analytic integral of the remainder, whose relative error is of order 1e-9). The
    *_closed and *_sum columns belong to the psi model, *_discrete to the cell model: pass
    each model's own fitted (mu, sigma) for its own columns (`lognormal_table` does)."""
    mu_a, sigma_a = np.broadcast_arrays(
        np.atleast_1d(np.asarray(mu, float)), np.atleast_1d(np.asarray(sigma, float))
    )
    if np.any(sigma_a <= 0):
        raise InvalidArgumentError("sigma must be positive")
    rows = []
    for m, s in zip(mu_a, sigma_a, strict=True):
        p1_closed, ent_closed = _closed_forms(m, s, vocab_size)
        p1_inf, ent_inf = _closed_forms(m, s, None)
        k_max = vocab_size if vocab_size else _HEAD
        k = np.arange(1, k_max + 1, dtype=np.float64)
        tail = _lognormal_tail(m, s, k_max + 0.5) if vocab_size is None else (0.0, 0.0)
        log_psi = -(LOG_SQRT_2PI + np.log(s) + np.log(k)) - (np.log(k) - m) ** 2 / (2 * s**2)
        p1_sum, ce_sum = _entropy_p1(log_psi, *tail)
        cell_a, cell_b = cell_edges(k, m, s)
        p1_disc, ce_disc = _entropy_p1(log_cell(cell_a, cell_b, special.log_ndtr), *tail)
        rows.append(
            {"mu": m, "sigma": s, "mu_over_sigma": m / s}
            | {"neg_log_p1_closed": p1_closed, "rank_entropy_closed": ent_closed}
            | {"neg_log_p1_closed_untruncated": p1_inf, "rank_entropy_closed_untruncated": ent_inf}
            | {"neg_log_p1_sum": p1_sum, "rank_entropy_sum": ce_sum}
            | {"neg_log_p1_discrete": p1_disc, "rank_entropy_discrete": ce_disc}
        )
    return pd.DataFrame(rows).assign(vocab_size=vocab_size if vocab_size else pd.NA)


_PSI_COLUMNS = ("_closed", "_closed_untruncated", "_sum")


def _own_predictions(mu, sigma, mu_psi, sigma_psi, vocab_size: int | None) -> pd.DataFrame:
    """appendix_b with the cell model's parameters for *_discrete and the psi model's for the
    rest."""
    cell = appendix_b(mu, sigma, vocab_size)
    psi = appendix_b(mu_psi, sigma_psi, vocab_size)
    for col in psi.columns:
        if col.endswith(_PSI_COLUMNS):
            cell[col] = psi[col].to_numpy()
    return cell


def lognormal_table(runs: RunsLike, ties: str = "pessimistic") -> pd.DataFrame:
    """Per run: mu, sigma, mu_over_sigma of the discretised lognormal, lognormal
    loglik_per_token, llr_vs_power_law and llr_vs_loglogistic (per token, > 0: lognormal
    better), max_cdf_error, mu_psi and sigma_psi (appendix B's psi model fitted to the same
    ranks), the measured neg_log_rbp1 and ce (mean nll), and the appendix-B predictions, each
    from its own model's parameters and truncated to |V| (`appendix_b`; rank_entropy_* is the
    entropy of the rank distribution, not a cross-entropy)."""
    rows = []
    for run in as_runs(runs):
        hist = rank_histogram(run.stats, ties)  # tokens or their summary: the same histogram
        comp = compare_rank_distributions(hist).set_index("distribution")
        ln = comp.loc["lognormal"]
        psi = fit_psi_lognormal(hist).params
        pred = (
            _own_predictions(ln["mu"], ln["sigma"], psi["mu"], psi["sigma"], run.vocab_size)
            .iloc[0]
            .drop(["mu", "sigma", "mu_over_sigma", "vocab_size"])
        )
        rows.append(
            {"family": run.family, "model": run.model, "corpus": run.corpus, "S": run.S, "ties": ties}
            | {
                "vocab_size": run.vocab_size,
                "n_tokens": run.n_tokens,
                "mu": ln["mu"],
                "sigma": ln["sigma"],
                "mu_over_sigma": ln["mu"] / ln["sigma"],
            }
            | {"loglik_per_token": ln["loglik_per_token"], "max_cdf_error": ln["max_cdf_error"]}
            | {"llr_vs_power_law": -comp.loc["power_law", "llr_per_token_vs_lognormal"]}
            | {"llr_vs_loglogistic": -comp.loc["loglogistic", "llr_per_token_vs_lognormal"]}
            | {"mu_psi": psi["mu"], "sigma_psi": psi["sigma"]}
            | {"neg_log_rbp1": float(-np.log(hist[1] / hist.sum())), "ce": cross_entropy(run.stats)}
            | pred.to_dict()
        )
    return pd.DataFrame(rows)


def parameter_scaling(table: pd.DataFrame, by: Iterable[str] = ("family", "corpus", "ties")) -> pd.DataFrame:
    """How mu, sigma and mu/sigma move with S, per group: OLS on ln S (slope_per_log_s,
    intercept, r2_linear) and, when the parameter keeps one sign, a power law |p| = A S^-alpha
    (alpha_power, r2_power; alpha < 0 means |p| grows with S)."""
    by = [c for c in by if c in table.columns]
    rows = []
    for key, frame in table.groupby(by, dropna=False) if by else [((), table)]:
        key = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        x = np.log(frame["S"].to_numpy(np.float64))
        for param in ("mu", "sigma", "mu_over_sigma"):
            y = frame[param].to_numpy(np.float64)
            row = key | {"parameter": param, "n_models": len(y)}
            if len(np.unique(x)) >= 2:
                slope, intercept = np.polyfit(x, y, 1)
                tss = np.sum((y - y.mean()) ** 2)
                resid = y - (intercept + slope * x)
                row |= {"slope_per_log_s": slope, "intercept": intercept}
                row["r2_linear"] = 1 - resid @ resid / tss if tss > 0 else np.nan
                if np.all(y > 0) or np.all(y < 0):
                    f = fit_power_law(np.exp(x), np.abs(y))
                    row |= {"sign": int(np.sign(y[0])), "alpha_power": f.alpha, "r2_power": f.r2}
            rows.append(row)
    cols = [
        "parameter",
        "n_models",
        "slope_per_log_s",
        "intercept",
        "r2_linear",
        "sign",
        "alpha_power",
        "r2_power",
    ]
    return pd.DataFrame(rows).reindex(columns=by + cols)


def simulate_scaling(
    params: pd.DataFrame,
    S: Iterable[float] | None = None,
    n_grid: int = 40,
    sigma_mode: str = "trend",
    vocab_size: int | None = None,
    n_tokens: int = 0,
    seed: int = 0,
) -> pd.DataFrame:
    """Paper Figure 8b: CE and -log p_1 as functions of S implied by the lognormal hypotheses.

    From per-model fits (`params` with columns S, mu, sigma; one family and corpus), mu/sigma
    is interpolated linearly in ln S (hypothesis 2) and sigma either likewise ("trend") or held
    at its mean ("constant"); `appendix_b` then gives both curves on the S grid (default
    `n_grid` log-spaced sizes spanning the models). When params also has mu_psi and sigma_psi
    (`lognormal_table` does), the psi model's columns (*_closed, *_sum) follow those trends and
    only *_discrete follows (mu, sigma). With n_tokens > 0, ranks are also sampled from the
    discretised model (needs vocab_size) to add sampling noise: columns neg_log_p1_sampled
    and rank_entropy_sampled (mean of -log p_R). The curves are deterministic functions of the
    fitted trends: fit them for their exponent, not for a confidence interval."""
    if sigma_mode not in ("trend", "constant"):
        raise InvalidArgumentError(f"sigma_mode must be 'trend' or 'constant', got {sigma_mode!r}")
    if n_tokens and not vocab_size:
        raise InvalidArgumentError("sampling ranks (n_tokens > 0) needs vocab_size")
    x = np.log(params["S"].to_numpy(np.float64))
    if len(np.unique(x)) < 2:
        raise InvalidArgumentError("simulate_scaling needs fits for at least two model sizes")
    grid = np.geomspace(np.exp(x.min()), np.exp(x.max()), n_grid) if S is None else np.asarray(list(S), float)

    def trend(mu_col: str, sigma_col: str) -> tuple[np.ndarray, np.ndarray]:
        ratio = np.polyfit(x, (params[mu_col] / params[sigma_col]).to_numpy(np.float64), 1)
        sig = np.polyfit(x, params[sigma_col].to_numpy(np.float64), 1)
        if sigma_mode == "trend":
            sigma = np.polyval(sig, np.log(grid))
        else:
            sigma = np.full(len(grid), params[sigma_col].mean())
        if np.any(sigma <= 0):
            raise InvalidArgumentError(
                "the sigma trend turns non-positive on this S grid; use sigma_mode='constant'"
            )
        return np.polyval(ratio, np.log(grid)) * sigma, sigma

    mu, sigma = trend("mu", "sigma")
    if {"mu_psi", "sigma_psi"} <= set(params.columns):
        out = _own_predictions(mu, sigma, *trend("mu_psi", "sigma_psi"), vocab_size).assign(S=grid)
    else:
        out = appendix_b(mu, sigma, vocab_size).assign(S=grid)
    if n_tokens:
        rng = np.random.default_rng(seed)
        sampled = []
        for m, s in zip(out["mu"], out["sigma"], strict=True):
            logp = log_pmf("lognormal", {"mu": m, "sigma": s}, vocab_size)
            r = sample_lognormal_ranks(m, s, vocab_size, n_tokens, seed=int(rng.integers(2**31)))
            sampled.append((-np.log(np.mean(r == 1)), -np.mean(logp[r - 1])))
        out["neg_log_p1_sampled"], out["rank_entropy_sampled"] = np.array(sampled).T
    return out[["S"] + [c for c in out.columns if c != "S"]]
