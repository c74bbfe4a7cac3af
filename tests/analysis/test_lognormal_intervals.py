"""Document-bootstrap intervals for the lognormal's mu and sigma: the binned fit against an
independent scipy fit, coverage of known parameters near nominal, and the Study table."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from rbplab.analysis.lognormal import (
    fit_binned_lognormal,
    grid_cells,
    lognormal_interval,
    sample_lognormal_ranks,
)
from rbplab.core.stats import TokenStats
from rbplab.study import distribution, synthetic_study

VOCAB = 5000


def documents(mu: float, sigma: float, n_docs: int, per_doc: int, seed: int) -> TokenStats:
    ranks = sample_lognormal_ranks(mu, sigma, VOCAB, n_docs * per_doc, seed=seed)
    doc = np.repeat(np.arange(n_docs), per_doc)
    return TokenStats.from_ranks(ranks, VOCAB, doc=doc, nll=np.full(len(ranks), 1.0))


def test_binned_fit_matches_an_independent_likelihood():
    data = documents(2.0, 1.5, 30, 200, seed=1)
    first, last, counts = grid_cells(data, "pessimistic")
    pooled = counts.sum(axis=0)

    def nll(theta):  # the same model written with scipy's normal CDF, fitted by Nelder-Mead
        mu, sigma = theta
        if sigma <= 0:
            return np.inf
        cdf = stats.norm.cdf
        cells = cdf((np.log(last + 0.5) - mu) / sigma) - cdf((np.log(first - 0.5) - mu) / sigma)
        total = cdf((np.log(VOCAB + 0.5) - mu) / sigma) - cdf((np.log(0.5) - mu) / sigma)
        return -(pooled @ np.log(np.maximum(cells, 1e-300)) - pooled.sum() * np.log(total))

    ref = optimize.minimize(nll, [1.0, 1.0], method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10})
    mu, sigma = fit_binned_lognormal(first, last, pooled, VOCAB, (1.0, 1.0))
    assert mu == pytest.approx(ref.x[0], abs=1e-4) and sigma == pytest.approx(ref.x[1], abs=1e-4)
    assert pooled.sum() == len(data)


@pytest.mark.statistical
def test_intervals_cover_known_parameters_near_nominal():
    mu, sigma, draws = 2.0, 1.5, 60
    covered = {"mu": 0, "sigma": 0}
    for seed in range(draws):
        out = lognormal_interval(documents(mu, sigma, 40, 150, seed), n_boot=100, seed=seed)
        covered["mu"] += out["mu_low"] <= mu <= out["mu_high"]
        covered["sigma"] += out["sigma_low"] <= sigma <= out["sigma_high"]
        assert out["mu_low"] < out["mu"] < out["mu_high"]
    # 95 % intervals over 60 draws: a binomial count's 2.5-sigma range is about 51..60
    assert covered["mu"] >= 51 and covered["sigma"] >= 51, covered


def test_study_table_and_bad_arguments():
    study = synthetic_study(n_tokens=3000, corpora=("a",))
    table = distribution.lognormal_intervals(study, n_boot=20)
    assert {"mu_low", "sigma_high", "mu_over_sigma_low"} <= set(table.columns)
    assert np.allclose(table["mu"], distribution.lognormal(study)["mu"])  # the exact fit's estimate
    with pytest.raises(ValueError, match="n_boot must be at least 2"):
        lognormal_interval(study.runs[0].stats, n_boot=1)
