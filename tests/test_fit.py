"""Power-law fits: recovery, CI coverage, LOO, extrapolation, pooled F-test, offset form, bootstrap."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rbplab import fit, metrics
from rbplab.stats import TokenStats

SIZES = np.geomspace(1e7, 1e10, 6)


def power_table(alpha=0.08, prefactor=3.0, noise=0.0, seed=0, families=("a",), sizes=SIZES):
    rng = np.random.default_rng(seed)
    rows = []
    for f, fam in enumerate(families):
        a = alpha[f] if np.ndim(alpha) else alpha
        loss = prefactor * (1 + 0.2 * f) * sizes**-a * np.exp(rng.normal(0, noise, len(sizes)))
        rows += [
            {"family": fam, "model": f"{fam}{i}", "S": s, "loss": v}
            for i, (s, v) in enumerate(zip(sizes, loss, strict=True))
        ]
    return pd.DataFrame(rows)


def test_recovers_noiseless_power_law():
    f = fit.fit_power_law(SIZES, 2.5 * SIZES**-0.07)
    assert f.alpha == pytest.approx(0.07) and f.prefactor == pytest.approx(2.5) and f.r2 == pytest.approx(1.0)
    assert f.predict(1e12) == pytest.approx(2.5 * 1e12**-0.07)
    with pytest.raises(ValueError, match="positive and finite"):
        fit.fit_power_law(SIZES, np.r_[0.0, np.ones(5)])
    with pytest.raises(ValueError, match="two distinct"):
        fit.fit_power_law([1e8, 1e8], [1.0, 0.9])


def test_alpha_ci_covers_at_nominal_rate():
    # 200 seeded draws of 6 noisy models: the 95% t-interval should cover the true alpha
    # 95% of the time; 3 binomial standard deviations of 200 draws is about 0.046.
    true_alpha = 0.08
    covered = []
    for seed in range(200):
        t = power_table(alpha=true_alpha, noise=0.03, seed=seed)
        f = fit.fit_power_law(t["S"], t["loss"])
        covered.append(f.alpha_ci_low <= true_alpha <= f.alpha_ci_high)
    assert abs(np.mean(covered) - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 200)
    f = fit.fit_power_law(t["S"], t["loss"])
    assert f.alpha_ci_high - f.alpha == pytest.approx(sps.t.ppf(0.975, 4) * f.alpha_se)


def test_prediction_interval_covers_new_models():
    hits = []
    for seed in range(200):
        t = power_table(noise=0.05, seed=seed, sizes=np.geomspace(1e7, 1e11, 7))
        f = fit.fit_power_law(t["S"][:-1], t["loss"][:-1])
        low, high = f.prediction_interval(t["S"].iloc[-1])
        hits.append(low <= t["loss"].iloc[-1] <= high)
    assert abs(np.mean(hits) - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 200)


def test_scaling_fits_groups_dedupes_and_notes():
    t = pd.concat(
        [power_table().assign(metric="ce"), power_table().assign(metric="ce")]
    )  # CE repeated over k
    out = fit.scaling_fits(t)
    assert len(out) == 1 and out.loc[0, "alpha"] == pytest.approx(0.08) and out.loc[0, "n_models"] == 6
    assert out.loc[0, "alpha_loo_min"] == pytest.approx(0.08) and out.loc[0, "alpha_jackknife_se"] < 1e-9
    clash = t.copy()
    clash.iloc[0, clash.columns.get_loc("loss")] *= 2
    with pytest.raises(ValueError, match="several"):
        fit.scaling_fits(clash)
    flat = power_table().assign(loss=lambda f: np.where(f["S"] > 1e9, 0.0, f["loss"]))
    note = fit.scaling_fits(flat).loc[0]
    assert np.isnan(note["alpha"]) and "positive" in note["note"]
    with pytest.raises(ValueError, match="not in table"):
        fit.scaling_fits(t, by=["nope"])


def test_leave_one_out_flags_an_outlier():
    t = power_table(noise=0.005, seed=1)
    t.loc[2, "loss"] *= 1.5
    loo = fit.leave_one_out(t)
    assert len(loo) == 6
    worst = loo.loc[loo["r2"].idxmax()]
    assert worst["dropped_model"] == "a2" and worst["r2"] > 0.99
    summary = fit.scaling_fits(t).iloc[0]
    assert summary["alpha_loo_min"] <= summary["alpha"] <= summary["alpha_loo_max"]


def test_extrapolation_check():
    exact = fit.extrapolation_check(power_table().assign(metric="rbp"), n_holdout=2)
    assert len(exact) == 2 and list(exact["model"]) == ["a4", "a5"]
    np.testing.assert_allclose(exact["loss_predicted"], exact["loss_observed"])
    np.testing.assert_allclose(exact["value_observed"], np.exp(-exact["loss_observed"]))
    # A loss flattening towards a floor (E > 0): a pure power law under-predicts the largest model.
    t = power_table()
    t["loss"] = 0.5 + 20 * t["S"] ** -0.2
    bent = fit.extrapolation_check(t.assign(metric="ce"))
    assert bent.loc[0, "loss_log_error"] < 0
    assert bent.loc[0, "value_predicted"] == bent.loc[0, "loss_predicted"]  # CE is its own loss


def test_pooled_fit_and_shared_slope_test():
    same = fit.pooled_fits(
        power_table(alpha=[0.08, 0.08, 0.08], noise=0.01, seed=3, families=("a", "b", "c"))
    )
    assert len(same) == 3 and same["alpha"].nunique() == 1
    assert same.loc[0, "alpha"] == pytest.approx(0.08, abs=0.005) and same.loc[0, "p_value"] > 0.01
    assert same.loc[0, "df_num"] == 2 and same.loc[0, "df_den"] == 18 - 6
    differ = fit.pooled_fits(power_table(alpha=[0.05, 0.12], noise=0.01, seed=3, families=("a", "b")))
    assert differ.loc[0, "p_value"] < 1e-6
    np.testing.assert_allclose(differ["alpha_separate"], [0.05, 0.12], atol=0.01)


def test_offset_power_law():
    S = np.geomspace(1e6, 1e11, 8)
    f = fit.fit_offset_power_law(S, 1.7 + 40 * S**-0.25)
    assert (f.E, f.alpha) == pytest.approx((1.7, 0.25), rel=1e-4) and f.A == pytest.approx(40, rel=1e-3)
    assert not f.alpha_at_grid_edge and f.r2 == pytest.approx(1.0)
    rising = fit.fit_offset_power_law(S, 1 + 0.01 * np.log(S))  # would need A < 0: clamp to A = 0
    assert rising.A == 0.0 and rising.E == pytest.approx(np.mean(1 + 0.01 * np.log(S)))
    out = fit.offset_fits(power_table(families=("a", "b")))
    assert list(out["family"]) == ["a", "b"] and np.all(out["E"] >= 0) and np.all(out["A"] >= 0)
    with pytest.raises(ValueError, match="three"):
        fit.fit_offset_power_law(S[:2], [1.0, 0.9])


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
        runs.append(
            metrics.Run("fam", f"m{i}", "corp", S, TokenStats.from_ranks(ranks, 100, doc=doc, nll=nll))
        )
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
