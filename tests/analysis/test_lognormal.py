"""Lognormal rank model: MLE recovery and model comparison."""

import numpy as np
import pytest
from scipy import optimize
from scipy.stats import norm

from rbplab.analysis import lognormal as ln
from rbplab.analysis import metrics
from rbplab.core.stats import TIES, TokenStats

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
    for ties in TIES:
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
    f = ln.compare_rank_distributions(hist_of(np.round(x[keep]).astype(int))).set_index("distribution")
    assert f.loc["loglogistic", "m"] == pytest.approx(2.0, abs=0.03)
    assert f.loc["loglogistic", "scale"] == pytest.approx(0.8, abs=0.03)
