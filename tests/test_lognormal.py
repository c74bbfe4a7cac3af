"""Lognormal rank model: MLE recovery, model comparison, appendix-B formulas, simulation."""

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special
from scipy.stats import norm

from rbplab import lognormal as ln
from rbplab import metrics
from rbplab.stats import TokenStats

V = 50_000


def hist_of(ranks, vocab=V):
    return np.bincount(ranks, minlength=vocab + 1).astype(float)


def test_pmf_is_the_truncated_rounded_lognormal():
    mu, sigma = 1.3, 1.7
    pmf = ln.lognormal_pmf(mu, sigma, 1000)
    r = np.arange(1, 1001)
    cells = norm.cdf((np.log(r + 0.5) - mu) / sigma) - norm.cdf((np.log(r - 0.5) - mu) / sigma)
    np.testing.assert_allclose(pmf, cells / cells.sum(), rtol=1e-9)
    assert pmf.sum() == pytest.approx(1.0)
    far = ln.lognormal_pmf(30.0, 1.0, 1000)  # all mass deep in the upper tail: no cancellation
    assert np.all(np.isfinite(far)) and far.sum() == pytest.approx(1.0) and far[-1] > far[0]


@pytest.mark.parametrize(("mu", "sigma"), [(1.0, 2.0), (-1.5, 2.5), (3.0, 1.2)])
def test_recovers_lognormal_parameters(mu, sigma):
    ranks = ln.sample_lognormal_ranks(mu, sigma, V, 100_000, seed=int(10 * sigma))
    f = ln.fit_lognormal(hist_of(ranks))
    assert f.converged and f.n_tokens == 100_000
    # Within 4 standard errors; the SEs themselves must be plausible (they grow when most of
    # the mass is truncated below rank 1, as for mu = -1.5).
    for name, true in (("mu", mu), ("sigma", sigma)):
        assert abs(f.params[name] - true) < 4 * f.params_se[name]
        assert 0.002 < f.params_se[name] < 0.2
    assert f.loglik == pytest.approx(np.log(f.pmf()[ranks - 1]).sum(), rel=1e-9)


def test_mle_is_the_likelihood_maximum():
    ranks = ln.sample_lognormal_ranks(0.5, 1.8, 5000, 20_000, seed=3)
    counts = np.bincount(ranks, minlength=5001).astype(float)
    f = ln.fit_lognormal(counts)

    def nll(theta):
        return -counts[1:] @ np.log(ln.lognormal_pmf(theta[0], np.exp(theta[1]), 5000))

    ref = optimize.minimize(nll, [0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-7, "fatol": 1e-7})
    assert f.params["mu"] == pytest.approx(ref.x[0], abs=1e-3)
    assert f.params["sigma"] == pytest.approx(np.exp(ref.x[1]), abs=1e-3)
    assert f.loglik >= -ref.fun - 1e-6


def test_inputs_and_ties():
    g = np.array([0, 0, 3, 5, 10])
    e = np.array([1, 3, 1, 2, 1])
    stats = TokenStats(np.zeros(5, int), np.arange(5), g, e, np.zeros(5), 20)
    for ties in metrics.TIES:
        a = ln.fit_lognormal(stats, ties)
        b = ln.fit_lognormal(metrics.rank_histogram(stats, ties))
        c = ln.fit_lognormal(metrics.rbp_curve(stats, ties))
        assert a.params == pytest.approx(b.params) and a.params == pytest.approx(c.params)
    with pytest.raises(ValueError, match="h\\[0\\] = 0"):
        ln.fit_lognormal(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="empty"):
        ln.fit_lognormal(np.zeros(10))


def test_comparison_prefers_the_true_family():
    lognormal = ln.compare_rank_distributions(
        hist_of(ln.sample_lognormal_ranks(1.0, 2.0, V, 100_000, seed=5))
    )
    lognormal = lognormal.set_index("distribution")
    assert lognormal.loc["power_law", "llr_per_token_vs_lognormal"] < -0.01
    assert lognormal.loc["loglogistic", "llr_per_token_vs_lognormal"] < 0
    assert lognormal.loc["lognormal", "max_cdf_error"] < 0.01

    r = np.arange(1, V + 1)
    zeta = r**-1.6 / np.sum(r**-1.6)
    power = np.random.default_rng(6).choice(r, size=100_000, p=zeta)
    comp = ln.compare_rank_distributions(hist_of(power)).set_index("distribution")
    assert comp.loc["power_law", "s"] == pytest.approx(1.6, abs=0.02)
    assert comp.loc["power_law", "llr_per_token_vs_lognormal"] > 0
    assert comp.loc["power_law", "loglik_per_token"] == comp["loglik_per_token"].max()


def test_loglogistic_recovery():
    rng = np.random.default_rng(7)
    x = np.exp(2.0 + 0.8 * rng.logistic(size=200_000))
    keep = (x >= 0.5) & (x < V + 0.5)
    f = ln.fit_loglogistic(hist_of(np.round(x[keep]).astype(int)))
    assert f.params["m"] == pytest.approx(2.0, abs=0.03) and f.params["scale"] == pytest.approx(0.8, abs=0.03)


def test_appendix_b_closed_forms():
    mu, sigma = np.array([1.0, -0.5, 2.0]), np.array([2.0, 1.2, 3.0])
    out = ln.appendix_b(mu, sigma)
    # eq. 21 is the simplification of eq. 18; evaluate eq. 18 from the truncated moments.
    a, big_p = -mu / sigma, norm.cdf(mu / sigma)
    phi = norm.pdf(a)
    c = 0.5 * phi / sigma + big_p
    i1 = mu * big_p + sigma * phi
    i2 = (mu**2 + sigma**2) * big_p + mu * sigma * phi
    eq18 = (
        np.log(np.sqrt(2 * np.pi) * sigma)
        + np.log(c)
        + ((i2 - 2 * mu * i1 + mu**2 * c) / (2 * sigma**2) + i1) / c
    )
    np.testing.assert_allclose(out["ce_closed"], eq18, rtol=1e-12)
    eq16 = np.log(c) + np.log(np.sqrt(2 * np.pi) * sigma) + mu**2 / (2 * sigma**2)
    np.testing.assert_allclose(out["neg_log_p1_closed"], eq16, rtol=1e-12)
    # The approximations (integrals for sums) land within a tenth of a nat of the exact sums.
    assert np.all(np.abs(out["ce_closed"] - out["ce_sum"]) < 0.1)
    assert np.all(np.abs(out["neg_log_p1_closed"] - out["neg_log_p1_sum"]) < 0.1)


def test_appendix_b_exact_sums():
    mu, sigma = 1.5, 2.5
    k = np.arange(1, (1 << 22) + 1, dtype=float)
    log_psi = -np.log(np.sqrt(2 * np.pi) * sigma * k) - (np.log(k) - mu) ** 2 / (2 * sigma**2)
    brute = special.logsumexp(log_psi)
    p = np.exp(log_psi - brute)
    # Brute force to 2^22 misses a tail of mass ~3e-7; the analytic tail makes up the rest.
    row = ln.appendix_b(mu, sigma).iloc[0]
    assert row["neg_log_p1_sum"] == pytest.approx(brute - log_psi[0], abs=1e-6)
    assert row["ce_sum"] == pytest.approx(-(p @ np.log(p)), abs=2e-5)
    finite = ln.appendix_b(mu, sigma, vocab_size=1000).iloc[0]
    pmf = ln.lognormal_pmf(mu, sigma, 1000)
    assert finite["neg_log_p1_discrete"] == pytest.approx(-np.log(pmf[0]))
    assert finite["ce_discrete"] == pytest.approx(-(pmf @ np.log(pmf)))
    assert finite["neg_log_p1_sum"] < row["neg_log_p1_sum"]  # truncation concentrates mass
    with pytest.raises(ValueError, match="sigma"):
        ln.appendix_b(0.0, -1.0)


def lognormal_runs(sizes=(1e6, 1e7, 1e8, 1e9), vocab=2000, n=30_000, slope=-0.3, sigma=1.8):
    runs = []
    for i, S in enumerate(sizes):
        mu = 2.0 + slope * np.log(S / sizes[0])
        ranks = ln.sample_lognormal_ranks(mu, sigma, vocab, n, seed=i)
        nll = 0.2 + 0.8 * np.log(ranks)
        runs.append(metrics.Run("fam", f"m{i}", "corp", S, TokenStats.from_ranks(ranks, vocab, nll=nll)))
    return runs


def test_lognormal_table_and_parameter_scaling():
    table = ln.lognormal_table(lognormal_runs())
    assert len(table) == 4 and np.all(table["llr_vs_power_law"] > 0)
    np.testing.assert_allclose(table["sigma"], 1.8, atol=0.06)
    np.testing.assert_allclose(table["mu_over_sigma"], table["mu"] / table["sigma"])
    # The fitted model's P(R = 1) reproduces the measured RBP_1.
    np.testing.assert_allclose(table["neg_log_p1_discrete"], table["neg_log_rbp1"], atol=0.03)
    scaling = ln.parameter_scaling(table).set_index("parameter")
    assert scaling.loc["mu", "slope_per_log_s"] == pytest.approx(-0.3, abs=0.02)
    assert scaling.loc["mu", "r2_linear"] > 0.99
    assert abs(scaling.loc["sigma", "slope_per_log_s"]) < 0.02


def test_simulation_of_both_scaling_curves():
    params = pd.DataFrame({"S": [1e6, 1e7, 1e8, 1e9], "mu": [2.0, 1.3, 0.6, -0.1], "sigma": [2.0] * 4})
    sim = ln.simulate_scaling(params, n_grid=12, vocab_size=5000, n_tokens=20_000, seed=1)
    assert (
        len(sim) == 12
        and np.all(np.diff(sim["ce_discrete"]) < 0)
        and np.all(np.diff(sim["neg_log_p1_sum"]) < 0)
    )
    np.testing.assert_allclose(sim["mu_over_sigma"], np.linspace(1.0, -0.05, 12), atol=1e-9)
    np.testing.assert_allclose(sim["ce_sampled"], sim["ce_discrete"], rtol=0.03)
    np.testing.assert_allclose(sim["neg_log_p1_sampled"], sim["neg_log_p1_discrete"], rtol=0.05)
    exps = ln.simulation_exponents(sim).set_index("quantity")
    assert np.all(exps["alpha"] > 0) and {"ce_closed", "neg_log_p1_closed", "ce_sampled"} <= set(exps.index)
    const = ln.simulate_scaling(params.assign(sigma=[1.5, 2.0, 2.5, 3.0]), n_grid=3, sigma_mode="constant")
    np.testing.assert_allclose(const["sigma"], 2.25)
    with pytest.raises(ValueError, match="vocab_size"):
        ln.simulate_scaling(params, n_tokens=10)
