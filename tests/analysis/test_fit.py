"""Power-law fits: recovery, CI coverage, LOO, extrapolation."""

import numpy as np
import pandas as pd
import pytest
from helpers.factories import SIZES, power_table
from scipy import stats as sps

from rbplab.analysis import fit


def test_recovers_noiseless_power_law():
    f = fit.fit_power_law(SIZES, 2.5 * SIZES**-0.07)
    assert f.alpha == pytest.approx(0.07) and f.prefactor == pytest.approx(2.5) and f.r2 == pytest.approx(1.0)
    assert f.predict(1e12) == pytest.approx(2.5 * 1e12**-0.07)
    with pytest.raises(ValueError, match="positive and finite"):
        fit.fit_power_law(SIZES, np.r_[0.0, np.ones(5)])
    with pytest.raises(ValueError, match="two distinct"):
        fit.fit_power_law([1e8, 1e8], [1.0, 0.9])


@pytest.mark.statistical
def test_alpha_ci_covers_at_nominal_rate():
    # 200 seeded draws of 6 noisy models: the 95% t-interval should cover the true alpha
    # 95% of the time; 3 binomial standard deviations of 200 draws is about 0.046.
    true_alpha = 0.08
    covered = []
    for seed in range(200):
        t = power_table(alpha=true_alpha, noise=0.03, seed=seed)
        f = fit.fit_power_law(t["S"], t["loss"])
        covered.append(f.alpha_low <= true_alpha <= f.alpha_high)
    assert abs(np.mean(covered) - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 200)
    f = fit.fit_power_law(t["S"], t["loss"])
    assert f.alpha_high - f.alpha == pytest.approx(sps.t.ppf(0.975, 4) * f.alpha_se)


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


def test_leave_one_out_range_and_jackknife_by_hand():
    t = power_table(noise=0.005, seed=1)
    t.loc[2, "loss"] *= 1.5
    x, y = np.log(t["S"].to_numpy()), np.log(t["loss"].to_numpy())
    n = len(x)
    loo = np.array([-np.polyfit(np.delete(x, i), np.delete(y, i), 1)[0] for i in range(n)])
    summary = fit.scaling_fits(t).iloc[0]
    assert summary["alpha_loo_min"] == pytest.approx(loo.min(), rel=1e-9)
    assert summary["alpha_loo_max"] == pytest.approx(loo.max(), rel=1e-9)
    jackknife = np.sqrt((n - 1) / n * np.sum((loo - loo.mean()) ** 2))
    assert summary["alpha_jackknife_se"] == pytest.approx(jackknife, rel=1e-9)
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


def test_confidence_interval_is_the_textbook_band_of_the_ols_line():
    rng = np.random.default_rng(3)
    S = np.geomspace(1e6, 1e9, 7)
    y = 3.0 * S**-0.07 * np.exp(rng.normal(0, 0.02, len(S)))
    f = fit.fit_power_law(S, y, level=0.9)
    x, z = np.log(S), np.log(y)
    slope, intercept = np.polyfit(x, z, 1)
    resid = z - (intercept + slope * x)
    s = np.sqrt(resid @ resid / (len(S) - 2))
    grid = np.geomspace(1e6, 1e10, 5)
    se = s * np.sqrt(1 / len(S) + (np.log(grid) - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
    half = sps.t.ppf(0.95, len(S) - 2) * se
    line = np.exp(intercept + slope * np.log(grid))
    low, high = f.confidence_interval(grid)
    assert np.allclose(low, line * np.exp(-half), rtol=1e-10) and np.allclose(
        high, line * np.exp(half), rtol=1e-10
    )
    p_low, p_high = f.prediction_interval(grid)
    assert np.all(p_low < low) and np.all(p_high > high)  # a new model scatters around the line too
