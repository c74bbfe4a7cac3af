"""Lognormal theory of ranks (paper appendix B) and its scaling with model size S.

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
The discretised, truncated rank model and its fits are in
`rbplab.analysis.lognormal`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import special

from rbplab.analysis._cells import LOG_SQRT_2PI, cell_edges, dot, log_cell
from rbplab.analysis.fit import fit_power_law
from rbplab.analysis.lognormal import (
    compare_rank_distributions,
    fit_psi_lognormal,
    log_pmf,
    sample_lognormal_ranks,
)
from rbplab.analysis.metrics import cross_entropy, rank_histogram
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs

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
