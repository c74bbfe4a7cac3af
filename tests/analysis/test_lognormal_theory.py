"""Lognormal theory: appendix-B formulas, per-run table, parameter scaling, simulation."""

import numpy as np
import pandas as pd
import pytest
from scipy import special
from scipy.stats import norm

from rbplab.analysis import lognormal as ln
from rbplab.analysis import lognormal as lt
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats


def test_appendix_b_closed_forms():
    mu, sigma = np.array([1.0, -0.5, 2.0]), np.array([2.0, 1.2, 3.0])
    out = lt.appendix_b(mu, sigma)
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
    np.testing.assert_allclose(out["rank_entropy_closed"], eq18, rtol=1e-12)
    eq16 = np.log(c) + np.log(np.sqrt(2 * np.pi) * sigma) + mu**2 / (2 * sigma**2)
    np.testing.assert_allclose(out["neg_log_p1_closed"], eq16, rtol=1e-12)
    # The approximations (integrals for sums) land within a tenth of a nat of the exact sums.
    assert np.all(np.abs(out["rank_entropy_closed"] - out["rank_entropy_sum"]) < 0.1)
    assert np.all(np.abs(out["neg_log_p1_closed"] - out["neg_log_p1_sum"]) < 0.1)


def test_appendix_b_exact_sums():
    mu, sigma = 1.5, 2.5
    k = np.arange(1, (1 << 22) + 1, dtype=float)
    log_psi = -np.log(np.sqrt(2 * np.pi) * sigma * k) - (np.log(k) - mu) ** 2 / (2 * sigma**2)
    brute = special.logsumexp(log_psi)
    p = np.exp(log_psi - brute)
    # Brute force to 2^22 misses a tail of mass ~3e-7; the analytic tail makes up the rest.
    row = lt.appendix_b(mu, sigma).iloc[0]
    assert row["neg_log_p1_sum"] == pytest.approx(brute - log_psi[0], abs=1e-6)
    assert row["rank_entropy_sum"] == pytest.approx(-(p @ np.log(p)), abs=2e-5)
    finite = lt.appendix_b(mu, sigma, vocab_size=1000).iloc[0]
    pmf = ln.lognormal_pmf(mu, sigma, 1000)
    assert finite["neg_log_p1_discrete"] == pytest.approx(-np.log(pmf[0]))
    assert finite["rank_entropy_discrete"] == pytest.approx(-(pmf @ np.log(pmf)))
    assert finite["neg_log_p1_sum"] < row["neg_log_p1_sum"]  # truncation concentrates mass
    with pytest.raises(ValueError, match="sigma"):
        lt.appendix_b(0.0, -1.0)


def lognormal_runs(sizes=(1e6, 1e7, 1e8, 1e9), vocab=2000, n=30_000, slope=-0.3, sigma=1.8):
    runs = []
    for i, S in enumerate(sizes):
        mu = 2.0 + slope * np.log(S / sizes[0])
        ranks = ln.sample_lognormal_ranks(mu, sigma, vocab, n, seed=i)
        nll = 0.2 + 0.8 * np.log(ranks)
        runs.append(Run("fam", f"m{i}", "corp", S, TokenStats.from_ranks(ranks, vocab, nll=nll)))
    return runs


def test_lognormal_table_and_parameter_scaling():
    table = lt.lognormal_table(lognormal_runs())
    assert len(table) == 4 and np.all(table["llr_vs_power_law"] > 0)
    np.testing.assert_allclose(table["sigma"], 1.8, atol=0.06)
    np.testing.assert_allclose(table["mu_over_sigma"], table["mu"] / table["sigma"])
    # The fitted model's P(R = 1) reproduces the measured RBP_1.
    np.testing.assert_allclose(table["neg_log_p1_discrete"], table["neg_log_rbp1"], atol=0.03)
    scaling = lt.parameter_scaling(table).set_index("parameter")
    assert scaling.loc["mu", "slope_per_log_s"] == pytest.approx(-0.3, abs=0.02)
    assert scaling.loc["mu", "r2_linear"] > 0.99
    assert abs(scaling.loc["sigma", "slope_per_log_s"]) < 0.02


def test_simulation_of_both_scaling_curves():
    params = pd.DataFrame({"S": [1e6, 1e7, 1e8, 1e9], "mu": [2.0, 1.3, 0.6, -0.1], "sigma": [2.0] * 4})
    sim = lt.simulate_scaling(params, n_grid=12, vocab_size=5000, n_tokens=20_000, seed=1)
    assert (
        len(sim) == 12
        and np.all(np.diff(sim["rank_entropy_discrete"]) < 0)
        and np.all(np.diff(sim["neg_log_p1_sum"]) < 0)
    )
    np.testing.assert_allclose(sim["mu_over_sigma"], np.linspace(1.0, -0.05, 12), atol=1e-9)
    np.testing.assert_allclose(sim["rank_entropy_sampled"], sim["rank_entropy_discrete"], rtol=0.03)
    np.testing.assert_allclose(sim["neg_log_p1_sampled"], sim["neg_log_p1_discrete"], rtol=0.05)
    const = lt.simulate_scaling(params.assign(sigma=[1.5, 2.0, 2.5, 3.0]), n_grid=3, sigma_mode="constant")
    np.testing.assert_allclose(const["sigma"], 2.25)
    with pytest.raises(ValueError, match="vocab_size"):
        lt.simulate_scaling(params, n_tokens=10)


def test_closed_forms_truncated_at_vocab_by_quadrature():
    from scipy import integrate

    mu, sigma, vocab = 1.0, 2.5, 500
    psi = lambda x: norm.pdf((np.log(x) - mu) / sigma) / (sigma * x)  # noqa: E731
    big_p = integrate.quad(psi, 1, vocab, limit=200)[0]
    i1 = integrate.quad(lambda x: psi(x) * np.log(x), 1, vocab, limit=200)[0]
    i2 = integrate.quad(lambda x: psi(x) * np.log(x) ** 2, 1, vocab, limit=200)[0]
    c = psi(1.0) / 2 + big_p
    eq18 = (
        np.log(np.sqrt(2 * np.pi) * sigma)
        + np.log(c)
        + ((i2 - 2 * mu * i1 + mu**2 * c) / (2 * sigma**2) + i1) / c
    )
    row = lt.appendix_b(mu, sigma, vocab_size=vocab).iloc[0]
    assert row["rank_entropy_closed"] == pytest.approx(eq18, rel=1e-9)
    assert row["neg_log_p1_closed"] == pytest.approx(np.log(c) - np.log(psi(1.0)), rel=1e-9)
    untrunc = lt.appendix_b(mu, sigma).iloc[0]
    assert row["rank_entropy_closed_untruncated"] == pytest.approx(untrunc["rank_entropy_closed"])
    # Truncation is most of the gap between the printed formula and the truncated sums.
    gap_trunc = abs(row["rank_entropy_closed"] - row["rank_entropy_sum"])
    assert gap_trunc < 0.05 < abs(row["rank_entropy_closed_untruncated"] - row["rank_entropy_sum"])


def test_psi_fit_recovers_its_own_parameters():
    mu, sigma, vocab = 1.2, 1.7, 3000
    k = np.arange(1, vocab + 1)
    logw = -np.log(k) - (np.log(k) - mu) ** 2 / (2 * sigma**2)
    pmf = np.exp(logw - special.logsumexp(logw))
    hist = np.r_[0.0, pmf * 1e7]  # the expected histogram: the MLE is the truth
    fitted = ln.fit_psi_lognormal(hist)
    assert fitted.params["mu"] == pytest.approx(mu, abs=1e-4)
    assert fitted.params["sigma"] == pytest.approx(sigma, abs=1e-4)
    # The cell model fitted to the same ranks lands elsewhere: the two are different models.
    cell = ln.fit_lognormal(hist)
    assert abs(cell.params["mu"] / cell.params["sigma"] - mu / sigma) > 0.01


def test_lognormal_table_uses_each_models_own_parameters():
    ranks = ln.sample_lognormal_ranks(1.5, 2.0, 1500, 40_000, seed=3)
    table = lt.lognormal_table([Run("f", "m", "c", 1e6, TokenStats.from_ranks(ranks, 1500))]).iloc[0]
    k = np.arange(1, 1501)
    logw = -np.log(k) - (np.log(k) - table["mu_psi"]) ** 2 / (2 * table["sigma_psi"] ** 2)
    p = np.exp(logw - special.logsumexp(logw))
    assert table["neg_log_p1_sum"] == pytest.approx(-np.log(p[0]), rel=1e-9)
    assert table["rank_entropy_sum"] == pytest.approx(-(p @ np.log(p)), rel=1e-9)
    pmf = ln.lognormal_pmf(table["mu"], table["sigma"], 1500)
    assert table["neg_log_p1_discrete"] == pytest.approx(-np.log(pmf[0]), rel=1e-9)
    # Both models fitted to the same ranks predict -log RBP_1 close to the measured value.
    assert table["neg_log_p1_sum"] == pytest.approx(table["neg_log_rbp1"], abs=0.05)
    assert table["neg_log_p1_discrete"] == pytest.approx(table["neg_log_rbp1"], abs=0.05)
