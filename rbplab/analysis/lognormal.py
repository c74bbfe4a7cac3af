"""Lognormal rank distribution (paper section 5.2 and appendix B).

Discretisation. Ranks are integers in [1, |V|]; we model R = round(X) for a continuous X whose
log is location-scale distributed, truncated to [1/2, |V| + 1/2):

    P(R = r) = [F(b_r) - F(a_r)] / [F(b_|V|) - F(a_1)],  a_r = (ln(r - 1/2) - mu)/sigma,
                                                          b_r = (ln(r + 1/2) - mu)/sigma,

with F = Phi for the lognormal and the logistic CDF for the log-logistic. The appendix's
model, p_r = psi(r) / sum_j psi(j) with psi the density at the integers, approximates these
cells by the midpoint rule but is a different model: fitted to the same ranks the two give
different (mu, sigma) (the log-rank of rank 1 is 0 in psi, a whole cell [ln 1/2, ln 3/2) here),
so `fit_psi_lognormal` fits it on its own for the appendix's formulas
(`rbplab.analysis.lognormal_theory`). Fits maximise the likelihood of the rank
histogram (a sum over distinct ranks, not tokens), so millions of tokens cost nothing extra.

Model comparison uses the log-likelihood ratio per token, (l_a - l_b)/n, and no p-values:
with ~1e6 tokens that are correlated within documents, any fixed misfit is "significant" at
any level, and the independence a Vuong or likelihood-ratio test assumes does not hold. The
per-token ratio is an effect size: the mean log-probability gain of one model over another.

Appendix-B predictions, the per-run lognormal table and the scaling with S live in
`rbplab.analysis.lognormal_theory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize, special

from rbplab.analysis._cells import LOG_SQRT_2PI, cell_edges, dot, log_cell
from rbplab.analysis.metrics import RBPCurve, rank_histogram
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.stats import TokenStats, check_ties
from rbplab.core.summary import EntrySummary

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
