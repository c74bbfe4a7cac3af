"""Lognormal rank distribution (paper section 5.2 and appendix B).

Discretisation. Ranks are integers in [1, |V|]; we model R = round(X) for a continuous X whose
log is location-scale distributed, truncated to [1/2, |V| + 1/2):

    P(R = r) = [F(b_r) - F(a_r)] / [F(b_|V|) - F(a_1)],  a_r = (ln(r - 1/2) - mu)/sigma,
                                                          b_r = (ln(r + 1/2) - mu)/sigma,

with F = Phi for the lognormal and the logistic CDF for the log-logistic. The appendix's
density at the integers, psi(r), is the midpoint-rule value of exactly these cells, so fitted
(mu, sigma) mean the same thing in `appendix_b`. Fits maximise the likelihood of the rank
histogram (a sum over distinct ranks, not tokens), so millions of tokens cost nothing extra.

Model comparison uses the log-likelihood ratio per token, (l_a - l_b)/n, and no p-values:
with ~1e6 tokens that are correlated within documents, any fixed misfit is "significant" at
any level, and the independence a Vuong or likelihood-ratio test assumes does not hold. The
per-token ratio is an effect size: the mean log-probability gain of one model over another.

Appendix B reads p_k as the probability that the target has rank k, so -log p_1 is -log
RBP_1 and "CE" is the entropy of the rank distribution (the mean nll of a calibrated model
whose rank-k token carries probability p_k); `lognormal_table` reports it next to the
measured mean nll for that reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize, special

from rbplab.fit import fit_power_law
from rbplab.metrics import RBPCurve, RunsLike, as_runs, cross_entropy, rank_histogram
from rbplab.stats import TokenStats

DISTRIBUTIONS = ("lognormal", "loglogistic", "power_law")
_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)
_HEAD = 1 << 14  # exact terms of infinite sums; the rest is an analytic tail (midpoint rule)

# Symmetric standard distributions of the log-rank: (log CDF, log density).
_STANDARD = {
    "lognormal": (special.log_ndtr, lambda t: -0.5 * t**2 - _LOG_SQRT_2PI),
    "loglogistic": (special.log_expit, lambda t: special.log_expit(t) + special.log_expit(-t)),
}


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum's own loop, not BLAS: multithreaded BLAS ddot is slow on busy machines, and these
    # vectors (<= |V|) are too short for threads to pay off.
    return float(np.einsum("i,i->", a, b))


def _log_cell(a: np.ndarray, b: np.ndarray, logcdf) -> np.ndarray:
    """log(F(b) - F(a)) for a < b without cancellation: in the upper tail use survival
    functions (F symmetric, so S(t) = F(-t))."""
    upper = a > 0
    hi = np.where(upper, logcdf(-a), logcdf(b))
    lo = np.where(upper, logcdf(-b), logcdf(a))
    with np.errstate(divide="ignore"):
        return hi + np.log(-np.expm1(lo - hi))


def _edges(ranks: np.ndarray, mu: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    r = ranks.astype(np.float64)
    return (np.log(r - 0.5) - mu) / sigma, (np.log(r + 0.5) - mu) / sigma


def log_pmf(distribution: str, params: dict[str, float], vocab_size: int) -> np.ndarray:
    """log P(R = r) for r = 1..|V| of a fitted distribution (see module docstring)."""
    r = np.arange(1, vocab_size + 1)
    if distribution == "power_law":
        logw = -params["s"] * np.log(r)
        return logw - special.logsumexp(logw)
    logcdf = _STANDARD[distribution][0]
    loc, scale = _loc_scale(distribution, params)
    a, b = _edges(r, loc, scale)
    return _log_cell(a, b, logcdf) - _log_cell(a[:1], b[-1:], logcdf)[0]


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


def _histogram(data: TokenStats | RBPCurve | np.ndarray, ties: str) -> tuple[np.ndarray, int]:
    if isinstance(data, TokenStats):
        hist = rank_histogram(data, ties)
    elif isinstance(data, RBPCurve):
        hist = data.histogram
    else:
        hist = np.asarray(data, dtype=np.float64)
        if hist.ndim != 1 or len(hist) < 2 or hist[0] != 0 or np.any(hist < 0):
            raise ValueError("a rank histogram must be 1-D, h[r] >= 0 for r = 0..|V|, with h[0] = 0")
    if hist.sum() <= 0:
        raise ValueError("the rank histogram is empty")
    return hist, len(hist) - 1


def _fit_location_scale(distribution: str, hist: np.ndarray, vocab_size: int) -> RankDistributionFit:
    logcdf, logpdf = _STANDARD[distribution]
    ranks = np.flatnonzero(hist)
    counts = hist[ranks]
    n = counts.sum()
    bounds_r = np.array([1, vocab_size])

    def nll_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        loc, scale = theta[0], np.exp(theta[1])
        a, b = _edges(ranks, loc, scale)
        lo, hi = _edges(bounds_r, loc, scale)
        a, b = np.r_[a, lo[0]], np.r_[b, hi[1]]  # last cell: the truncation normaliser
        logd = _log_cell(a, b, logcdf)
        fa, fb = np.exp(logpdf(a) - logd), np.exp(logpdf(b) - logd)
        d_loc = -(fb - fa) / scale  # d log(F(b) - F(a)) / d loc
        d_logscale = -(b * fb - a * fa)  # d / d log(scale)
        w = np.r_[counts, -n] / n
        return -_dot(w, logd), -np.array([_dot(w, d_loc), _dot(w, d_logscale)])

    logr = np.log(ranks)
    m0 = _dot(counts, logr) / n
    s0 = max(float(np.sqrt(_dot(counts, (logr - m0) ** 2) / n)), 0.3)
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


def fit_lognormal(data: TokenStats | RBPCurve | np.ndarray, ties: str = "pessimistic") -> RankDistributionFit:
    """MLE of the discretised truncated lognormal (params mu, sigma of the log-rank) from
    TokenStats, an RBPCurve, or a rank histogram h[r], r = 0..|V|."""
    hist, vocab = _histogram(data, ties)
    return _fit_location_scale("lognormal", hist, vocab)


def fit_loglogistic(
    data: TokenStats | RBPCurve | np.ndarray, ties: str = "pessimistic"
) -> RankDistributionFit:
    """MLE of the discretised truncated log-logistic (params m, scale of the log-rank): the
    lognormal's shape with exponential instead of Gaussian tails in log-rank."""
    hist, vocab = _histogram(data, ties)
    return _fit_location_scale("loglogistic", hist, vocab)


def fit_rank_power_law(
    data: TokenStats | RBPCurve | np.ndarray, ties: str = "pessimistic"
) -> RankDistributionFit:
    """MLE of the truncated discrete power law P(R = r) = r^-s / sum_{j<=|V|} j^-s (param s)."""
    hist, vocab = _histogram(data, ties)
    n = hist.sum()
    logr = np.log(np.arange(1, vocab + 1))
    mean_logr = _dot(hist[1:], logr) / n

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


def compare_rank_distributions(
    data: TokenStats | RBPCurve | np.ndarray, ties: str = "pessimistic"
) -> pd.DataFrame:
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


def _entropy_p1(logw_head: np.ndarray, tail_mass: float, tail_ent: float) -> tuple[float, float]:
    """-log p_1 and entropy of p_k = w_k / c given log-weights of the head and the tail's
    sum w and sum w(-log w)."""
    w = np.exp(logw_head)
    c = w.sum() + tail_mass
    ent_sum = -_dot(w, logw_head) + tail_ent
    return float(np.log(c) - logw_head[0]), float(np.log(c) + ent_sum / c)


def _lognormal_tail(mu: float, sigma: float, start: float) -> tuple[float, float]:
    """Integrals over x > start of psi and psi * (-log psi) for the lognormal density psi."""
    z = (np.log(start) - mu) / sigma
    q, phi = special.ndtr(-z), np.exp(-0.5 * z**2 - _LOG_SQRT_2PI)
    i1 = mu * q + sigma * phi  # int psi ln x
    i2 = sigma**2 * (q + z * phi)  # int psi (ln x - mu)^2
    return float(q), float((_LOG_SQRT_2PI + np.log(sigma)) * q + i1 + i2 / (2 * sigma**2))


def appendix_b(
    mu: float | Iterable[float], sigma: float | Iterable[float], vocab_size: int | None = None
) -> pd.DataFrame:
    """Appendix-B predictions of -log p_1 (= -log RBP_1) and CE from (mu, sigma), three ways:

    *_closed    the paper's closed forms, eq. 16 and eq. 21 with c ~ psi(1)/2 + Phi(mu/sigma) (eq. 20);
    *_sum       exact sums for the appendix's model p_k = psi(k) / sum_j psi(j);
    *_discrete  exact values for the fitted discretised model (cells [r - 1/2, r + 1/2)).
    Sums run over k = 1..|V| when vocab_size is given, else to infinity (2^14 exact terms plus
    the analytic integral of the remainder, whose relative error is of order 1e-9)."""
    mu_a, sigma_a = np.broadcast_arrays(
        np.atleast_1d(np.asarray(mu, float)), np.atleast_1d(np.asarray(sigma, float))
    )
    if np.any(sigma_a <= 0):
        raise ValueError("sigma must be positive")
    rows = []
    for m, s in zip(mu_a, sigma_a, strict=True):
        a = -m / s
        big_p, phi_a = special.ndtr(m / s), np.exp(-0.5 * a**2 - _LOG_SQRT_2PI)
        c = 0.5 * phi_a / s + big_p
        base = _LOG_SQRT_2PI + np.log(s) + np.log(c) + m**2 / (2 * s**2)
        ce_closed = base + (big_p * ((s**2 - m**2) / (2 * s**2) + m) + phi_a * (s - m / (2 * s))) / c
        k_max = vocab_size if vocab_size else _HEAD
        k = np.arange(1, k_max + 1, dtype=np.float64)
        tail = _lognormal_tail(m, s, k_max + 0.5) if vocab_size is None else (0.0, 0.0)
        log_psi = -(_LOG_SQRT_2PI + np.log(s) + np.log(k)) - (np.log(k) - m) ** 2 / (2 * s**2)
        p1_sum, ce_sum = _entropy_p1(log_psi, *tail)
        cell_a, cell_b = _edges(k, m, s)
        p1_disc, ce_disc = _entropy_p1(_log_cell(cell_a, cell_b, special.log_ndtr), *tail)
        rows.append(
            {"mu": m, "sigma": s, "mu_over_sigma": m / s, "neg_log_p1_closed": base, "ce_closed": ce_closed}
            | {
                "neg_log_p1_sum": p1_sum,
                "ce_sum": ce_sum,
                "neg_log_p1_discrete": p1_disc,
                "ce_discrete": ce_disc,
            }
        )
    return pd.DataFrame(rows).assign(vocab_size=vocab_size if vocab_size else pd.NA)


def lognormal_table(runs: RunsLike, ties: str = "pessimistic") -> pd.DataFrame:
    """Per run: mu, sigma, mu_over_sigma, lognormal loglik_per_token, llr_vs_power_law and
    llr_vs_loglogistic (per token, > 0: lognormal better), max_cdf_error, the measured
    neg_log_rbp1 and ce (mean nll), and the appendix-B predictions (truncated to |V|)."""
    rows = []
    for run in as_runs(runs):
        hist = rank_histogram(run.stats, ties)
        comp = compare_rank_distributions(hist).set_index("distribution")
        ln = comp.loc["lognormal"]
        pred = (
            appendix_b(ln["mu"], ln["sigma"], run.stats.vocab_size)
            .iloc[0]
            .drop(["mu", "sigma", "vocab_size"])
        )
        rows.append(
            {"family": run.family, "model": run.model, "corpus": run.corpus, "S": run.S, "ties": ties}
            | {
                "vocab_size": run.stats.vocab_size,
                "n_tokens": len(run.stats),
                "mu": ln["mu"],
                "sigma": ln["sigma"],
            }
            | {"loglik_per_token": ln["loglik_per_token"], "max_cdf_error": ln["max_cdf_error"]}
            | {"llr_vs_power_law": -comp.loc["power_law", "llr_per_token_vs_lognormal"]}
            | {"llr_vs_loglogistic": -comp.loc["loglogistic", "llr_per_token_vs_lognormal"]}
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
    `n_grid` log-spaced sizes spanning the models). With n_tokens > 0, ranks are also sampled
    from the discretised model (needs vocab_size) to add sampling noise: columns
    neg_log_p1_sampled and ce_sampled (mean of -log p_R)."""
    if sigma_mode not in ("trend", "constant"):
        raise ValueError(f"sigma_mode must be 'trend' or 'constant', got {sigma_mode!r}")
    if n_tokens and not vocab_size:
        raise ValueError("sampling ranks (n_tokens > 0) needs vocab_size")
    x = np.log(params["S"].to_numpy(np.float64))
    if len(np.unique(x)) < 2:
        raise ValueError("simulate_scaling needs fits for at least two model sizes")
    ratio = np.polyfit(x, (params["mu"] / params["sigma"]).to_numpy(np.float64), 1)
    sig = np.polyfit(x, params["sigma"].to_numpy(np.float64), 1)
    grid = np.geomspace(np.exp(x.min()), np.exp(x.max()), n_grid) if S is None else np.asarray(list(S), float)
    sigma = (
        np.polyval(sig, np.log(grid)) if sigma_mode == "trend" else np.full(len(grid), params["sigma"].mean())
    )
    if np.any(sigma <= 0):
        raise ValueError("the sigma trend turns non-positive on this S grid; use sigma_mode='constant'")
    out = appendix_b(np.polyval(ratio, np.log(grid)) * sigma, sigma, vocab_size).assign(S=grid)
    if n_tokens:
        rng = np.random.default_rng(seed)
        sampled = []
        for m, s in zip(out["mu"], out["sigma"], strict=True):
            logp = log_pmf("lognormal", {"mu": m, "sigma": s}, vocab_size)
            r = sample_lognormal_ranks(m, s, vocab_size, n_tokens, seed=int(rng.integers(2**31)))
            sampled.append((-np.log(np.mean(r == 1)), -np.mean(logp[r - 1])))
        out["neg_log_p1_sampled"], out["ce_sampled"] = np.array(sampled).T
    return out[["S"] + [c for c in out.columns if c != "S"]]


def simulation_exponents(sim: pd.DataFrame) -> pd.DataFrame:
    """Power-law exponent and R^2 of every simulated curve (columns ce_* and neg_log_p1_*)
    against S: one row per quantity with alpha, prefactor, r2."""
    rows = []
    for col in [c for c in sim.columns if c.startswith(("ce_", "neg_log_p1_"))]:
        try:
            f = fit_power_law(sim["S"], sim[col])
            rows.append({"quantity": col, "alpha": f.alpha, "prefactor": f.prefactor, "r2": f.r2})
        except ValueError as err:
            rows.append({"quantity": col, "note": str(err)})
    return pd.DataFrame(rows).reindex(columns=["quantity", "alpha", "prefactor", "r2", "note"])
