"""Formulas checked against values computed independently in the test (numpy least squares on
explicit design matrices, scipy distributions), never against another path through the package."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rbplab.analysis import fit, lognormal, metrics
from rbplab.core.stats import TokenStats
from rbplab.study import distribution

# Fixed, noisy losses: two families, five sizes each (no exact power law, so SEs are not 0).
S = np.array([1e6, 4e6, 2e7, 1e8, 6e8])
LOSS = {
    "a": np.array([3.10, 2.71, 2.52, 2.18, 2.01]),
    "b": np.array([4.05, 3.70, 3.12, 2.95, 2.60]),
}


def table() -> pd.DataFrame:
    rows = [
        {"family": f, "model": f"{f}{i}", "S": s, "loss": v}
        for f, losses in LOSS.items()
        for i, (s, v) in enumerate(zip(S, losses, strict=True))
    ]
    return pd.DataFrame(rows)


def ols_by_hand(X: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, int]:
    beta, *_ = np.linalg.lstsq(X, z, rcond=None)
    resid = z - X @ beta
    dof = len(z) - X.shape[1]
    cov = resid @ resid / dof * np.linalg.inv(X.T @ X)
    return beta, np.sqrt(np.diag(cov)), float(resid @ resid), dof


def test_per_family_fit_se_r2_and_jackknife():
    out = fit.scaling_fits(table(), by=["family"]).set_index("family")
    for fam, y in LOSS.items():
        X, z = np.column_stack([np.ones(5), np.log(S)]), np.log(y)
        beta, se, rss, dof = ols_by_hand(X, z)
        row = out.loc[fam]
        assert row["alpha"] == pytest.approx(-beta[1], rel=1e-10)
        assert row["prefactor"] == pytest.approx(np.exp(beta[0]), rel=1e-10)
        assert row["alpha_se"] == pytest.approx(se[1], rel=1e-10)
        assert row["r2"] == pytest.approx(1 - rss / np.sum((z - z.mean()) ** 2), rel=1e-10)
        half = sps.t.ppf(0.975, 3) * se[1]
        assert (row["alpha_low"], row["alpha_high"]) == pytest.approx((-beta[1] - half, -beta[1] + half))
        loo = np.array([-np.polyfit(np.log(np.delete(S, i)), np.delete(z, i), 1)[0] for i in range(5)])
        jack = np.sqrt(4 / 5 * np.sum((loo - loo.mean()) ** 2))  # Efron's (n-1)/n scaling
        assert row["alpha_jackknife_se"] == pytest.approx(jack, rel=1e-10)
        assert (row["alpha_loo_min"], row["alpha_loo_max"]) == pytest.approx((loo.min(), loo.max()))


def test_bootstrap_percentile_levels():
    # Token-level bootstrap of a Bernoulli mean: the replicates are ~ N(p, p(1-p)/n), so a
    # 90% percentile interval is p +- 1.645 sd (a 95% level, 1.96 sd, lies 0.3 sd outside the
    # tolerance of 0.15 sd, which covers Monte Carlo error with 4000 replicates).
    rng = np.random.default_rng(5)
    n, p = 20_000, 0.3
    ranks = np.where(rng.random(n) < p, 1, 2)
    stats = TokenStats.from_ranks(ranks, 10, doc=np.arange(n))
    ci = metrics.bootstrap_ci(stats, ks=[1], n_boot=4000, level=0.9, seed=1).set_index("metric")
    p_hat = np.mean(ranks == 1)
    sd = np.sqrt(p_hat * (1 - p_hat) / n)
    z90 = sps.norm.ppf(0.95)
    assert ci.loc["rbp", "estimate_low"] == pytest.approx(p_hat - z90 * sd, abs=0.15 * sd)
    assert ci.loc["rbp", "estimate_high"] == pytest.approx(p_hat + z90 * sd, abs=0.15 * sd)
    assert ci.loc["rbp", "se"] == pytest.approx(sd, rel=0.05)
    # And exactly the 5th and 95th percentiles of the replicates: the same resampling counts
    # (same seed), each replicate's RBP@1 computed by hand as the weighted share of rank-1 tokens.
    weights = metrics.bootstrap_weights(n, 4000, seed=1)
    vals = weights @ (ranks == 1) / n
    assert ci.loc["rbp", "estimate_low"] == pytest.approx(np.percentile(vals, 5), rel=1e-12)
    assert ci.loc["rbp", "estimate_high"] == pytest.approx(np.percentile(vals, 95), rel=1e-12)


def test_parameter_scaling_r2_by_hand():
    params = pd.DataFrame(
        {"family": "f", "corpus": "c", "ties": "pessimistic", "S": S}
        | {"mu": [2.4, 2.1, 1.85, 1.5, 1.32], "sigma": [2.0, 2.06, 1.98, 2.11, 2.05]}
    )
    params["mu_over_sigma"] = params["mu"] / params["sigma"]
    out = lognormal.parameter_scaling(params).set_index("parameter")
    X = np.column_stack([np.ones(5), np.log(S)])
    for name in ("mu", "sigma", "mu_over_sigma"):
        y = params[name].to_numpy()
        beta, _, rss, _ = ols_by_hand(X, y)
        assert out.loc[name, "slope_per_log_s"] == pytest.approx(beta[1], rel=1e-9)
        assert out.loc[name, "r2_linear"] == pytest.approx(1 - rss / np.sum((y - y.mean()) ** 2), rel=1e-9)
        beta_p, _, rss_p, _ = ols_by_hand(X, np.log(y))
        assert out.loc[name, "alpha_power"] == pytest.approx(-beta_p[1], rel=1e-9)
        ly = np.log(y)
        assert out.loc[name, "r2_power"] == pytest.approx(1 - rss_p / np.sum((ly - ly.mean()) ** 2), rel=1e-9)


def test_theory_versus_measured_by_hand():
    from rbplab.study import synthetic_study

    study = synthetic_study(sizes=(1e5, 1e6, 1e7), corpora=("c",), vocab_size=512, n_tokens=20_000)
    comp = distribution.ce_comparison(study, n_grid=5)
    measured = comp[comp["source"] == "empirical"]
    for run in study.runs:
        rows = measured[measured["model"] == run.model].set_index("quantity")["value"]
        assert rows["CE"] == pytest.approx(np.mean(run.stats.nll), rel=1e-12)
        ranks = run.stats.n_greater + run.stats.n_equal
        assert rows["-log RBP_1"] == pytest.approx(-np.log(np.mean(ranks == 1)), rel=1e-12)
    # Theory: mu/sigma and sigma linear in ln S through the fitted parameters, then the rank
    # entropy and -log p_1 of the rounded truncated lognormal, cells computed here with scipy.
    ln = distribution.lognormal(study)
    x = np.log(ln["S"].to_numpy())
    grid = np.geomspace(ln["S"].min(), ln["S"].max(), 5)
    sigma = np.polyval(np.polyfit(x, ln["sigma"], 1), np.log(grid))
    mu = np.polyval(np.polyfit(x, ln["mu"] / ln["sigma"], 1), np.log(grid)) * sigma
    theory = comp[comp["source"] == "lognormal"]
    r = np.arange(1, 513)
    for g, m, s in zip(grid, mu, sigma, strict=True):
        cells = sps.norm.cdf((np.log(r + 0.5) - m) / s) - sps.norm.cdf((np.log(r - 0.5) - m) / s)
        pmf = cells / cells.sum()
        at = theory[np.isclose(theory["S"], g)].set_index("quantity")["value"]
        assert at["CE"] == pytest.approx(-(pmf @ np.log(pmf)), rel=1e-8)
        assert at["-log RBP_1"] == pytest.approx(-np.log(pmf[0]), rel=1e-8)
    # Exponents: the measured one is the OLS slope of log CE on log S.
    exps = distribution.ce_exponents(study).set_index(["source", "quantity"])
    ce = measured[measured["quantity"] == "CE"].sort_values("S")
    slope = np.polyfit(np.log(ce["S"]), np.log(ce["value"]), 1)[0]
    assert exps.loc[("empirical", "CE"), "alpha"] == pytest.approx(-slope, rel=1e-9)
    assert np.isnan(exps.loc[("lognormal", "CE"), "alpha_low"])  # deterministic curve: no t-interval
