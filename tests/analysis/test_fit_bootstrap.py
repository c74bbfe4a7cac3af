"""Document-bootstrap fits: agreement with point fits, paired documents, SE calibration."""

import numpy as np
from helpers.factories import SIZES

from rbplab.analysis import fit, metrics
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats


def synthetic_runs(rng, alpha=0.1, prefactor=8.0, doc_spread=1.0, n_docs=40, per_doc=60, sizes=SIZES[:5]):
    """RBP_1 = exp(-A S^-alpha) per model; documents share a difficulty effect across models."""
    effect = rng.normal(0, doc_spread, n_docs)
    doc = np.repeat(np.arange(n_docs), per_doc)
    runs = []
    for i, S in enumerate(sizes):
        p = np.exp(-prefactor * S**-alpha)
        logit = np.log(p / (1 - p)) + effect[doc]
        hit = rng.random(len(doc)) < 1 / (1 + np.exp(-logit))
        ranks = np.where(hit, 1, rng.integers(2, 50, len(doc)))
        nll = np.where(hit, 0.5, 4.0) - 0.1 * np.log10(S)
        runs.append(Run("fam", f"m{i}", "corp", S, TokenStats.from_ranks(ranks, 100, doc=doc, nll=nll)))
    return runs


def test_bootstrap_fits_match_point_fits_and_pair_documents():
    runs = synthetic_runs(np.random.default_rng(11))
    boot = fit.bootstrap_fits(runs, ks=[1, 10], n_boot=200, seed=0)
    assert set(boot["metric"]) == {"rbp", "ce", "mean_p"} and len(boot) == 4
    point = fit.scaling_fits(metrics.metrics_table(runs, ks=[1, 10]))
    merged = boot.merge(point, on=["family", "corpus", "ties", "metric", "k"], suffixes=("", "_ols"))
    np.testing.assert_allclose(merged["alpha"], merged["alpha_ols"], rtol=1e-10)
    np.testing.assert_allclose(merged["r2"], merged["r2_ols"], rtol=1e-10)
    row = boot[(boot["metric"] == "rbp") & (boot["k"] == 1)].iloc[0]
    assert row["alpha_boot_low"] < row["alpha"] < row["alpha_boot_high"] and row["n_boot_valid"] == 200
    indep = fit.bootstrap_fits(runs, ks=[1], n_boot=200, seed=0, share_documents=False)
    indep_se = indep[indep["metric"] == "rbp"].iloc[0]["alpha_boot_se"]
    # A document's difficulty moves every model alike: paired resamples cancel it in the slope.
    assert row["alpha_boot_se"] < 0.7 * indep_se


def population_alpha(alpha=0.1, prefactor=8.0, doc_spread=0.8, sizes=SIZES[:5]):
    """alpha of the infinite-corpus RBP_1 = E_d[expit(logit p + d)], d ~ N(0, spread^2)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    p = np.exp(-prefactor * sizes**-alpha)
    logit = np.log(p / (1 - p))[:, None] + doc_spread * nodes[None, :]
    rbp = (1 / (1 + np.exp(-logit))) @ weights / weights.sum()
    return fit.fit_power_law(sizes, -np.log(rbp)).alpha


def test_bootstrap_se_matches_sampling_error_of_alpha():
    rng = np.random.default_rng(12)
    alphas, ses = [], []
    for _ in range(40):
        runs = synthetic_runs(rng, doc_spread=0.8, n_docs=30, per_doc=40)
        b = fit.bootstrap_fits(runs, ks=[1], n_boot=100, seed=int(rng.integers(1000)))
        row = b[b["metric"] == "rbp"].iloc[0]
        alphas.append(row["alpha"])
        ses.append(row["alpha_boot_se"])
    assert 0.6 < np.mean(ses) / np.std(alphas) < 1.6
    truth = population_alpha()
    assert abs(np.mean(alphas) - truth) < 4 * np.std(alphas) / np.sqrt(len(alphas))
