"""RBP_k for all k, tie conventions and CE against known answers."""

import numpy as np
import pandas as pd
import pytest
from helpers.factories import random_stats

from rbplab.analysis import metrics
from rbplab.core.runs import Run, as_runs
from rbplab.core.stats import TIES, TokenStats


def brute_rbp(stats, k, ties):
    g, e = stats.n_greater, stats.n_equal
    if ties == "pessimistic":
        return np.mean(g + e <= k)
    if ties == "optimistic":
        return np.mean(g + 1 <= k)
    return np.mean(np.clip((k - g) / e, 0, 1))


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_curve_matches_per_k_definition(ties):
    stats = random_stats(np.random.default_rng(1))
    curve = metrics.rbp_curve(stats, ties)
    ks = np.arange(1, stats.vocab_size + 1)
    expected = np.array([brute_rbp(stats, k, ties) for k in ks])
    np.testing.assert_allclose(curve.rbp(ks), expected, atol=1e-12)
    assert curve.rbp(stats.vocab_size) == pytest.approx(1.0)
    assert curve.histogram.sum() == pytest.approx(len(stats))


def test_constructed_ties():
    # One token tied with three others behind two better ones: g = 2, e = 4 -> ranks 3..6.
    stats = TokenStats(
        np.zeros(1, int), np.zeros(1, int), np.array([2]), np.array([4]), np.zeros(1), vocab_size=10
    )
    ks = np.arange(1, 8)
    np.testing.assert_allclose(metrics.rbp(stats, ks, "pessimistic"), [0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_allclose(metrics.rbp(stats, ks, "optimistic"), [0, 0, 1, 1, 1, 1, 1])
    np.testing.assert_allclose(metrics.rbp(stats, ks, "expected"), [0, 0, 0.25, 0.5, 0.75, 1, 1])
    hist = metrics.rank_histogram(stats, "expected")
    np.testing.assert_allclose(hist[3:7], 0.25)


def test_tie_conventions_are_ordered():
    curves = {t: metrics.rbp_curve(random_stats(np.random.default_rng(2)), t).cumulative for t in TIES}
    assert np.all(curves["optimistic"] >= curves["expected"] - 1e-9)
    assert np.all(curves["expected"] >= curves["pessimistic"] - 1e-9)
    assert np.any(curves["optimistic"] > curves["pessimistic"])


def test_untied_conventions_agree():
    stats = TokenStats.from_ranks(np.random.default_rng(3).integers(1, 50, 500), 50)
    a = [metrics.rbp_curve(stats, t).cumulative for t in TIES]
    np.testing.assert_array_equal(a[0], a[1])
    np.testing.assert_array_equal(a[0], a[2])


def test_curve_queries_and_errors():
    curve = metrics.rbp_curve(TokenStats.from_ranks([1, 2, 3, 4], 10))
    assert curve.rbp(2) == 0.5 and isinstance(curve.rbp(2), float)
    assert curve.rbp(2.7) == 0.5  # RBP is a step function of k
    assert curve.neg_log_rbp(4) == 0.0
    for bad in (0, 11, np.nan):
        with pytest.raises(ValueError, match="vocab_size"):
            curve.rbp(bad)
    frame = curve.to_frame([1, 4])
    assert list(frame.columns) == ["k", "rbp", "neg_log_rbp"] and frame["rbp"].tolist() == [0.25, 1.0]
    with pytest.raises(ValueError, match="ties"):
        metrics.rbp_curve(TokenStats.from_ranks([1], 2), "random")
    with pytest.raises(ValueError, match="k must lie"):
        metrics.run_metrics(TokenStats.from_ranks([1], 2), ks=[3])


def test_summary_metrics():
    nll = np.array([0.1, 1.0, 2.0, 0.5])
    stats = TokenStats.from_ranks([1, 3, 1, 2], 5, doc=[0, 0, 1, 1], nll=nll)
    table = metrics.run_metrics(stats, ks=[1, 2])
    row = table.set_index(["metric", table["k"].astype("float").fillna(0)])
    assert row.loc[("rbp", 1.0), "value"] == 0.5
    assert row.loc[("rbp", 2.0), "loss"] == pytest.approx(-np.log(0.75))
    assert row.loc[("ce", 0.0), "value"] == pytest.approx(nll.mean())
    assert row.loc[("mean_p", 0.0), "value"] == pytest.approx(np.exp(-nll).mean())
    assert table["k"].dtype == "Int64" and table["k"].isna().sum() == 2


def test_metrics_table_and_runs():
    rng = np.random.default_rng(9)
    runs = [
        Run("fam", f"m{i}", "c", 10.0**i, TokenStats.from_ranks(rng.integers(1, 30, 100), 40))
        for i in range(1, 4)
    ]
    table = metrics.metrics_table(runs, ks=[1, 10])
    assert len(table) == 3 * 4
    assert list(table.columns[:8]) == ["family", "model", "corpus", "S", "metric", "k", "value", "loss"]
    frame = pd.DataFrame([vars(r) for r in runs])
    pd.testing.assert_frame_equal(metrics.metrics_table(frame, ks=[1, 10]), table)
    mapping = {r.model: (r.S, r.stats) for r in runs}
    assert metrics.metrics_table(mapping, ks=[1])["family"].eq("default").all()
    with pytest.raises(ValueError, match="once"):
        as_runs(runs + runs[:1])
    with pytest.raises(ValueError, match="positive"):
        as_runs([Run("f", "m", "c", -1.0, runs[0].stats)])


def test_k_grids():
    ks = metrics.standard_ks(50257)
    assert ks[0] == 1 and ks[-1] < 50257 and {10, 50, 100, 20000, 30000} <= set(ks)
    assert np.all(np.diff(ks) > 0)
    ls = metrics.log_spaced_ks(1000, 10)
    assert ls[0] == 1 and ls[-1] == 1000
