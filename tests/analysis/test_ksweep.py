"""k-sweep: regimes, per-k fits, vocabulary limits, bootstrap columns, summary."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rbplab.analysis import fit, ksweep, metrics
from rbplab.analysis.lognormal import sample_lognormal_ranks
from rbplab.catalog import paper_reference
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats


def test_regime_labels():
    v = 50_257
    assert ksweep.regime(1, v) == "k=1"
    assert ksweep.regime(2, v) == "moderate" and ksweep.regime(100, v) == "moderate"
    assert ksweep.regime(101, v) == "intermediate" and ksweep.regime(10_052, v) == "large"
    assert ksweep.regime(10_051, v) == "intermediate"
    labels = ksweep.regime([1, 50, 5000, 30_000], v)
    assert labels.tolist() == ["k=1", "moderate", "intermediate", "large"]
    assert ksweep.regime(60, 200) == "large"  # tiny vocabularies: "large" wins over "moderate"
    assert ksweep.regime(1000, v, large_fraction=0.01) == "large"
    with pytest.raises(ValueError, match="k must lie"):
        ksweep.regime(0, v)
    with pytest.raises(ValueError, match="large_fraction"):
        ksweep.regime(5, v, large_fraction=0)


def make_runs(families=(("a", 600), ("b", 500)), sizes=(1e6, 1e7, 1e8, 1e9), n=8000):
    """Lognormal ranks whose location falls linearly in log S; two vocabularies."""
    runs = []
    for fam, vocab in families:
        for i, S in enumerate(sizes):
            ranks = sample_lognormal_ranks(2.0 - 0.25 * np.log(S / sizes[0]), 1.5, vocab, n, seed=i)
            stats = TokenStats.from_ranks(ranks, vocab, doc=np.arange(n) // 200)
            runs.append(Run(fam, f"{fam}{i}", "c", S, stats))
    return runs


def test_k_sweep_from_runs_and_from_table():
    runs = make_runs()
    sweep = ksweep.k_sweep(runs)
    assert {"family", "corpus", "ties", "k", "regime", "vocab_size", "alpha", "r2", "alpha_low"} <= set(sweep)
    for fam, vocab in (("a", 600), ("b", 500)):
        part = sweep[sweep["family"] == fam]
        assert part["k"].min() == 1 and part["k"].max() < vocab and np.all(part["vocab_size"] == vocab)
        assert np.all(part["n_models"] == 4)
        assert part.loc[part["k"] == 1, "regime"].item() == "k=1"
        assert np.all(part.loc[part["k"] >= vocab / 5, "regime"] == "large")
    # Small k: the law holds and the exponent grows with k (paper Figure 6b) for this model.
    small = sweep[(sweep["family"] == "a") & (sweep["k"] <= 10)]
    assert np.all(small["r2"] > 0.95) and np.all(np.diff(small["alpha"]) > 0)
    table = metrics.metrics_table(runs, ks=[1, 10, 100])
    from_table = ksweep.k_sweep(table)
    direct = fit.scaling_fits(table[table["metric"] == "rbp"], by=["family", "corpus", "ties", "k"])
    np.testing.assert_allclose(from_table["alpha"], direct["alpha"])
    pd.testing.assert_frame_equal(
        from_table.drop(columns="note"),
        ksweep.k_sweep(runs, ks=[1, 10, 100]).drop(columns="note"),
        check_dtype=False,
    )


def test_k_sweep_drops_thresholds_beyond_the_smallest_vocabulary():
    runs = make_runs(families=(("a", 600),))
    small_vocab = Run("a", "a9", "c", 1e10, TokenStats.from_ranks([1, 2, 3, 100], 150))
    sweep = ksweep.k_sweep(runs + [small_vocab], ks=[1, 10, 120, 149, 400])
    assert sweep["k"].tolist() == [1, 10, 120, 149] and np.all(sweep["vocab_size"] == 150)


def test_k_sweep_with_bootstrap():
    sweep = ksweep.k_sweep(make_runs(), ks=[1, 10, 550], n_boot=50, seed=1)
    assert sweep.groupby("family")["k"].max().to_dict() == {"a": 550, "b": 10}
    assert {"alpha_boot_se", "alpha_boot_low", "r2_boot_low", "n_boot_valid"} <= set(sweep)
    valid = sweep[sweep["note"].isna()]
    assert len(valid) == 4 and sweep.loc[sweep["k"] == 550, "alpha"].isna().all()  # RBP_550 = 1 there
    assert np.all(valid["alpha_boot_low"] < valid["alpha"]) and np.all(
        valid["alpha"] < valid["alpha_boot_high"]
    )


def test_sweep_summary():
    sweep = pd.DataFrame(
        {
            "family": "f",
            "corpus": "c",
            "k": [1, 10, 100, 1000, 10_000],
            "regime": ["k=1", "moderate", "moderate", "intermediate", "large"],
            "alpha": [0.05, 0.1, 0.2, 0.3, 0.5],
            "alpha_low": [0.04, 0.08, 0.15, 0.2, 0.4],
            "r2": [0.99, 0.98, 0.95, 0.5, 0.97],
        }
    )
    out = ksweep.sweep_summary(sweep, r2_threshold=0.9).iloc[0]
    assert out["k_max_r2"] == 100  # R^2 recovering at k = 10,000 does not extend the range
    assert out["k_max_law"] == 100
    assert out["alpha_k1"] == 0.05 and out["alpha_k100"] == 0.2
    assert out["alpha_mean_moderate"] == pytest.approx(0.15)
    assert np.isnan(out["alpha_mean_intermediate"]) and np.isnan(out["alpha_mean_large"])
    assert pd.isna(ksweep.sweep_summary(sweep.assign(r2=0.1)).iloc[0]["k_max_r2"])


@pytest.mark.parametrize(
    ("alpha", "alpha_low", "k_max_law"),
    [
        ([0.05, 0.1, -0.02, 0.3], [0.04, 0.08, -0.05, 0.2], 10),  # inverted at k = 100
        ([0.05, 0.1, 0.02, 0.3], [0.04, 0.08, -0.01, 0.2], 10),  # interval reaches below 0
        ([0.05, 0.1, 0.02, 0.3], [0.04, 0.08, np.nan, 0.2], 10),  # no interval: no claim
        ([-0.05, 0.1, 0.2, 0.3], [-0.06, 0.08, 0.15, 0.2], pd.NA),  # inverted at the first k
        ([0.05, 0.1, 0.2, 0.3], [0.04, 0.08, 0.15, 0.2], 1000),
    ],
)
def test_the_law_holds_only_where_alpha_and_its_interval_are_positive(alpha, alpha_low, k_max_law):
    sweep = pd.DataFrame(
        {
            "family": "f",
            "corpus": "c",
            "k": [1, 10, 100, 1000],
            "regime": ["k=1", "moderate", "moderate", "intermediate"],
            "alpha": alpha,
            "alpha_low": alpha_low,
            "r2": 0.99,
        }
    )
    out = ksweep.sweep_summary(sweep).iloc[0]
    assert out["k_max_r2"] == 1000  # R^2 alone would claim every k
    assert out["k_max_law"] is pd.NA if k_max_law is pd.NA else out["k_max_law"] == k_max_law
    in_law = [] if k_max_law is pd.NA else [k for k in (1, 10, 100, 1000) if k <= k_max_law]
    moderate = [a for k, a in zip((1, 10, 100, 1000), alpha, strict=True) if k in in_law and 1 < k <= 100]
    np.testing.assert_allclose(out["alpha_mean_moderate"], np.mean(moderate) if moderate else np.nan)


def test_sweep_summary_needs_a_k_sweep_table():
    with pytest.raises(ValueError, match="lacks \\['alpha_low'\\]"):
        ksweep.sweep_summary(pd.DataFrame({"k": [1], "regime": ["k=1"], "alpha": [0.1], "r2": [0.9]}))


def _ols_with_t_interval(log_s: np.ndarray, z: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """alpha, its lower t-interval end and R^2 of z = c - alpha log S, written out with numpy/scipy."""
    X = np.column_stack([np.ones_like(log_s), log_s])
    beta, rss, *_ = np.linalg.lstsq(X, z, rcond=None)
    df = len(z) - 2
    s2 = float(rss[0]) / df
    se = np.sqrt(s2 * np.linalg.inv(X.T @ X)[1, 1])
    alpha = -beta[1]
    r2 = 1 - float(rss[0]) / np.sum((z - z.mean()) ** 2)
    return alpha, alpha - sps.t.ppf((1 + level) / 2, df) * se, r2


def test_the_papers_gpt2_law_stops_before_k_10000():
    """On the paper's own GPT-2 numbers R^2 stays >= 0.9 up to k = 10,000, but there -log RBP_k
    rises with size (alpha < 0, paper Figure 5): the law holds up to k = 1,000 only."""
    ref = paper_reference()
    fits = {}
    for k, part in ref.groupby("k"):
        fits[k] = _ols_with_t_interval(
            np.log(part["S"].to_numpy(float)), np.log(-np.log(part["rbp"].to_numpy()))
        )
    ks = sorted(fits)
    holds = [fits[k][0] > 0 and fits[k][1] > 0 and fits[k][2] >= 0.9 for k in ks]
    expected_k_max = ks[holds.index(False) - 1] if not all(holds) else ks[-1]
    expected_r2_k_max = max(k for k in ks if all(fits[j][2] >= 0.9 for j in ks if j <= k))
    assert (expected_k_max, expected_r2_k_max) == (1000, 10_000)  # what the independent fit finds
    assert fits[10_000][0] < 0

    sweep = ksweep.k_sweep(ref.assign(metric="rbp", loss=-np.log(ref["rbp"])))
    out = ksweep.sweep_summary(sweep).iloc[0]
    assert out["k_max_law"] == expected_k_max and out["k_max_r2"] == expected_r2_k_max
    in_law = [k for k in ks if k <= expected_k_max]
    intermediate = [fits[k][0] for k in in_law if 100 < k]
    moderate = [fits[k][0] for k in in_law if 1 < k <= 100]
    assert out["alpha_mean_intermediate"] == pytest.approx(np.mean(intermediate), rel=1e-9)
    assert out["alpha_mean_moderate"] == pytest.approx(np.mean(moderate), rel=1e-9)
    assert out["r2_mean_intermediate"] == pytest.approx(
        np.mean([fits[k][2] for k in in_law if 100 < k]), rel=1e-9
    )


def test_two_models_claim_no_range():
    runs = [r for r in make_runs(sizes=(1e6, 1e8)) if r.family == "a"]
    sweep = ksweep.k_sweep(runs, ks=[1, 10, 100])
    assert sweep["r2"].isna().all() and sweep["alpha_low"].isna().all()
    assert sweep["note"].eq(fit.TWO_MODELS_NOTE).all()
    summary = ksweep.sweep_summary(sweep)
    assert summary["k_max_r2"].isna().all() and summary["note"].eq(fit.TWO_MODELS_NOTE).all()
    boot = fit.bootstrap_fits(runs, ks=[1, 10], n_boot=20)
    assert boot["r2"].isna().all() and boot["r2_boot_median"].isna().all()
    assert boot.loc[boot["metric"] == "rbp", "alpha_boot_se"].notna().all()
