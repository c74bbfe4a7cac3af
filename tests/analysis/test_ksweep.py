"""k-sweep: regimes, per-k fits, vocabulary limits, bootstrap columns, summary."""

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import fit, ksweep, metrics
from rbplab.analysis.lognormal import sample_lognormal_ranks
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
            "r2": [0.99, 0.98, 0.95, 0.5, 0.97],
        }
    )
    out = ksweep.sweep_summary(sweep, r2_threshold=0.9).iloc[0]
    assert out["k_max_r2"] == 100  # R^2 recovering at k = 10,000 does not extend the range
    assert out["alpha_k1"] == 0.05 and out["alpha_k100"] == 0.2
    assert out["alpha_mean_moderate"] == pytest.approx(0.15)
    assert pd.isna(ksweep.sweep_summary(sweep.assign(r2=0.1)).iloc[0]["k_max_r2"])


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
