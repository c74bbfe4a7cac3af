"""Scaling in data and compute: power laws in D per size, the joint law L(S, D) fitted as Hoffmann et al.
(2022) did, its bootstrap intervals (coverage over repeated draws from a known law), and the
compute-optimal frontier against its closed form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis.data_scaling import (
    JointLawFit,
    bootstrap_joint,
    compare_frontiers,
    data_fits,
    data_law_curves,
    fit_joint_law,
    frontier,
    joint_fits,
    joint_law_table,
    synthetic_law_table,
)

TRUTH = {"E": 1.7, "A": 300.0, "B": 900.0, "alpha": 0.34, "beta": 0.28}


def test_noiseless_law_is_recovered_exactly():
    table = synthetic_law_table(**TRUTH, noise=0.0)
    fit = fit_joint_law(table["S"], table["D"], table["loss"])
    for name, value in TRUTH.items():
        assert getattr(fit, name) == pytest.approx(value, rel=1e-3), name
    assert fit.converged and fit.n == len(table)


# The synthetic notebooks' CE law: a small size term (A S^-alpha ~ 0.2 next to E = 2), where alpha is
# hardest to pin down. Measured coverage over the same 40 draws: E, alpha, beta 0.95 each; median alpha
# interval width 0.17.
CE_LIKE = {"E": 2.0, "A": 30.0, "B": 60.0, "alpha": 0.34, "beta": 0.28}


@pytest.mark.slow  # ~1 minute per law on 2 busy cores
@pytest.mark.statistical
@pytest.mark.parametrize("truth", [TRUTH, CE_LIKE], ids=["rbp-like", "ce-like"])
def test_intervals_cover_the_truth_at_about_the_nominal_rate(truth):
    # 40 independent draws from a known law with 1% multiplicative noise; 95% percentile intervals
    # from 30 bootstrap replicates over checkpoints. Measured coverage (TRUTH): E 0.90, alpha 0.925,
    # beta 0.925; median alpha interval width 0.11.
    covered = {name: 0 for name in ("E", "alpha", "beta")}
    widths = []
    draws = 40
    for draw in range(draws):
        table = synthetic_law_table(**truth, noise=0.01, seed=100 + draw)
        row = joint_fits(table, n_boot=30, seed=draw, n_starts=3).iloc[0]
        for name in covered:
            covered[name] += row[f"{name}_low"] <= truth[name] <= row[f"{name}_high"]
        widths.append(row["alpha_high"] - row["alpha_low"])
    rates = {name: hits / draws for name, hits in covered.items()}
    assert all(rate >= 0.8 for rate in rates.values()), rates
    assert np.median(widths) < 0.2  # informative (alpha = 0.34), not merely wide


def test_frontier_matches_the_closed_form():
    law = JointLawFit(E=1.7, A=300.0, B=900.0, alpha=0.34, beta=0.28, objective=0.0, n=0, converged=True)
    C = np.logspace(12, 20, 5)
    table = frontier(law, C)
    assert list(table.columns) == ["C", "S_opt", "D_opt", "loss_opt"]
    np.testing.assert_allclose(table["S_opt"], law.optimal_size(C), rtol=1e-5)
    np.testing.assert_allclose(6 * table["S_opt"] * table["D_opt"], C)
    slope = np.polyfit(np.log(C), np.log(table["S_opt"]), 1)[0]
    assert slope == pytest.approx(0.28 / (0.34 + 0.28), abs=1e-6)
    # the optimum beats its neighbours at the same compute
    for c, s, loss in zip(C, table["S_opt"], table["loss_opt"], strict=True):
        for factor in (0.5, 2.0):
            assert law.predict(s * factor, c / (6 * s * factor)) > loss


def test_per_size_data_fits_find_the_d_exponent_of_a_pure_power_law():
    rows = []
    for S, beta in ((1e5, 0.2), (1e6, 0.4)):
        D = np.logspace(4, 7, 6)
        rows.append(
            pd.DataFrame({"quantity": "ce", "S": S, "D": np.r_[0.0, D], "loss": np.r_[10.0, 50 * D**-beta]})
        )
    table = data_fits(pd.concat(rows))
    assert list(table["S"]) == [1e5, 1e6] and list(table["n"]) == [6, 6]  # step 0 left out
    np.testing.assert_allclose(table["beta"], [0.2, 0.4])
    assert (table["beta_low"] <= table["beta"]).all() and (table["beta"] <= table["beta_high"]).all()


def test_data_law_curves_evaluate_each_sizes_law_over_its_own_d_range():
    rows = []
    for S, beta, top in ((1e5, 0.2, 6), (1e6, 0.4, 7)):
        D = np.logspace(4, top, 5)
        rows.append(pd.DataFrame({"S": S, "D": np.r_[0.0, D], "loss": np.r_[10.0, 50 * D**-beta]}))
    points = pd.concat(rows)
    unfitted = pd.DataFrame({"S": [3e6], "D": [1e4], "loss": [1.0]})  # one point: no fit, no curve
    curves = data_law_curves(data_fits(pd.concat([points, unfitted])), points, n=7)
    assert sorted(curves["S"].unique()) == [1e5, 1e6]
    for S, beta, top in ((1e5, 0.2, 6), (1e6, 0.4, 7)):
        curve = curves[curves["S"] == S]
        grid = np.logspace(4, top, 7)  # D = 0 (step 0) is not part of the range
        np.testing.assert_allclose(curve["D"], grid, rtol=1e-12)
        np.testing.assert_allclose(curve["fitted"], 50 * grid**-beta, rtol=1e-9)


def test_joint_fits_are_tidy_per_group():
    a = synthetic_law_table(**TRUTH, noise=0.005, seed=1).assign(quantity="ce")
    b = synthetic_law_table(**{**TRUTH, "beta": 0.4}, noise=0.005, seed=2).assign(quantity="neg_log_rbp1")
    table = joint_fits(pd.concat([a, b]), n_boot=8, n_starts=3)
    assert list(table["quantity"]) == ["ce", "neg_log_rbp1"]
    assert {"E", "E_low", "E_high", "alpha", "beta", "frontier_exponent", "n", "n_boot"} <= set(table.columns)
    assert table["beta"].to_numpy() == pytest.approx([0.28, 0.4], abs=0.03)


def test_frontier_comparison_tells_different_laws_apart_and_equal_ones_not():
    base = synthetic_law_table(**TRUTH, noise=0.005, seed=3)
    same = synthetic_law_table(**TRUTH, noise=0.005, seed=4)["loss"].to_numpy()
    steeper = synthetic_law_table(**{**TRUTH, "beta": 0.45}, noise=0.005, seed=5)["loss"].to_numpy()
    losses = {"ce": base["loss"].to_numpy(), "same": same, "steeper": steeper}
    table = compare_frontiers(base["S"], base["D"], losses, reference="ce", n_boot=30).set_index("quantity")
    assert not table.loc["same", "differs"]
    assert table.loc["steeper", "differs"] and table.loc["steeper", "difference"] > 0
    low, high = table.loc["steeper", ["difference_low", "difference_high"]]
    assert low <= table.loc["steeper", "difference"] <= high
    # Where the optimum lies: a law whose optimum at C = 6 x 2e5 x 1e6 is S = 2e5, D = 1e6 (inside
    # the sizes and checkpoints: alpha A S^-alpha = beta B D^-beta there); at C = 1e20 both lie outside.
    alpha, beta, A = TRUTH["alpha"], TRUTH["beta"], TRUTH["A"]
    law = {**TRUTH, "B": alpha * A * 2e5**-alpha * 1e6**beta / beta}
    draws = [synthetic_law_table(**law, noise=0.005, seed=seed)["loss"].to_numpy() for seed in (6, 7)]
    balanced = {"ce": draws[0], "same": draws[1]}
    inside = compare_frontiers(base["S"], base["D"], balanced, reference="ce", C=1.2e12, n_boot=5)
    assert inside["reference_S_opt"].item() == pytest.approx(2e5, rel=0.5)
    assert not inside["extrapolated"].item()
    far = compare_frontiers(base["S"], base["D"], balanced, reference="ce", C=1e20, n_boot=5)
    assert far["extrapolated"].all()


def test_document_replicates_enter_the_bootstrap():
    table = synthetic_law_table(**TRUTH, noise=0.0)
    loss = table["loss"].to_numpy()
    rng = np.random.default_rng(0)
    replicates = loss * np.exp(rng.normal(0, 0.02, (10, len(loss))))  # documents resampled: noisy losses
    _, plain = bootstrap_joint(table["S"], table["D"], {"ce": loss}, n_boot=10, n_starts=3)
    _, docs = bootstrap_joint(
        table["S"], table["D"], {"ce": loss}, n_boot=10, n_starts=3, replicates={"ce": replicates}
    )
    assert docs["ce"]["alpha"].std() > 10 * plain["ce"]["alpha"].std()
    rows = joint_law_table(
        table["S"],
        table["D"],
        {"ce": loss, "same": loss},
        n_boot=10,
        replicates={"ce": replicates},
        n_starts=3,
    ).set_index("quantity")
    assert rows.loc["ce", "resampled"] == "checkpoints and documents"
    assert rows.loc["same", "resampled"] == "checkpoints"
    for name, boot in (("ce", docs["ce"]), ("same", plain["ce"])):  # the same replicates, summarised
        assert rows.loc[name, "alpha_low"] == pytest.approx(np.quantile(boot["alpha"], 0.025))
        assert rows.loc[name, "alpha_high"] == pytest.approx(np.quantile(boot["alpha"], 0.975))


def test_unusable_input_is_refused():
    with pytest.raises(ValueError, match="5 parameters"):
        fit_joint_law([1, 2, 3], [1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="step 0"):
        fit_joint_law([1e3] * 6, [0, 1, 2, 3, 4, 5], [1.0] * 6)


def test_replicates_still_fit_when_the_floor_vanishes():
    # Without an irreducible loss the fitted E underflows to 0; replicates must not restart from
    # log(0) (where L-BFGS cannot move and every replicate would return the full-data fit).
    # The micro-suite's sizes and checkpoints, a law without floor; this draw's fit has E == 0.0.
    grid = {"sizes": (25472, 84912, 200064, 559392, 1189888, 2669568), "steps": (98, 195, 390, 781, 1562)}
    table = synthetic_law_table(E=0.0, A=0.5, B=30.0, alpha=0.3, beta=0.35, noise=0.01, seed=8, **grid)
    fits, boots = bootstrap_joint(table["S"], table["D"], {"x": table["loss"].to_numpy()}, n_boot=20)
    assert fits["x"].E == 0.0
    assert boots["x"]["alpha"].std() > 1e-3 and boots["x"]["beta"].std() > 1e-3
    rows = joint_law_table(table["S"], table["D"], {"x": table["loss"].to_numpy()}, n_boot=5)
    assert rows["note"].item() == "E -> 0: no floor in the data, E not identified"
    with_floor = synthetic_law_table(**TRUTH, noise=0.01, seed=4)
    assert (
        joint_law_table(with_floor["S"], with_floor["D"], {"x": with_floor["loss"]}, n_boot=5)["note"]
        .isna()
        .all()
    )
