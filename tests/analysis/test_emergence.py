"""Sequence success: windows, independence ratio, Markov departures, fitted sigmoids."""

import numpy as np
import pytest

from rbplab.analysis import emergence
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats


def markov_hits(rng, n, p, stay):
    """Stationary two-state chain with P(hit) = p and P(hit | hit) = stay."""
    leave = p * (1 - stay) / (1 - p)  # P(hit | miss) keeping p stationary
    hits = np.empty(n, dtype=bool)
    hits[0] = rng.random() < p
    u = rng.random(n)
    for i in range(1, n):
        hits[i] = u[i] < (stay if hits[i - 1] else leave)
    return hits


def test_windows_respect_documents_and_gaps():
    doc = np.array([0, 0, 0, 0, 1, 1, 1])
    pos = np.array([0, 1, 2, 4, 0, 1, 2])  # document 0 skips position 3
    ranks = np.array([1, 1, 1, 1, 1, 5, 1])
    stats = TokenStats(doc, pos, ranks - 1, np.ones(7, int), np.zeros(7), 10)
    out = emergence.sequence_success(stats, ns=(2, 3, 9), ks=(1,)).set_index("N")
    # Valid pairs: (0,1) (1,2) in doc 0 (2->3 is a gap), (4,5) (5,6) in doc 1; hits 1, 1, 0, 0.
    assert (out.loc[2, "n_windows"], out.loc[2, "p_empirical"]) == (4, 0.5)
    # Triples: (0,1,2) in doc 0, (4,5,6) in doc 1; hits 1, 0.
    assert (out.loc[3, "n_windows"], out.loc[3, "p_empirical"]) == (2, 0.5)
    assert out.loc[9, "n_windows"] == 0
    with pytest.raises(ValueError, match="Ns must"):
        emergence.sequence_success(stats, ns=(0,), ks=(1,))


def test_expected_ties_multiply_tie_probabilities():
    g, e = np.array([0, 1, 0]), np.array([2, 3, 1])
    stats = TokenStats(np.zeros(3, int), np.arange(3), g, e, np.zeros(3), 10)
    np.testing.assert_allclose(emergence.top_k_probability(stats, 2, "expected"), [1, 1 / 3, 1])
    # one window of 3: P(top 1) = 1/2, 0, 1 -> 0
    three = emergence.sequence_success(stats, ns=(3,), ks=(1,), ties="expected").iloc[0]
    assert (three["n_windows"], three["p_empirical"]) == (1, pytest.approx(0.5 * 0 * 1))
    # two windows of 2 at k = 2: P(top 2) = 1, 1/3, 1 -> 1/3 each
    two = emergence.sequence_success(stats, ns=(2,), ks=(2,), ties="expected").iloc[0]
    assert (two["n_windows"], two["p_empirical"]) == (2, pytest.approx(1 / 3))
    # pessimistic ranks 2, 4, 1: the middle token misses the top 2, so both windows fail
    assert emergence.sequence_success(stats, ns=(2,), ks=(2,)).iloc[0]["p_empirical"] == 0


def test_independent_tokens_match_rbp_to_the_n():
    rng = np.random.default_rng(0)
    n = 100_000
    ranks = np.where(rng.random(n) < 0.55, 1, rng.integers(2, 60, n))
    stats = TokenStats.from_ranks(ranks, 100, doc=np.repeat(np.arange(500), 200))
    table = emergence.sequence_success(stats, ns=(1, 2, 4, 6), ks=(1, 10))
    assert list(table.columns[:3]) == ["ties", "N", "k"]
    np.testing.assert_allclose(table.loc[table["N"] == 1, "ratio"], 1.0)
    np.testing.assert_allclose(table["ratio"], 1.0, atol=0.06)
    assert np.all(table["n_windows"] == 500 * (200 - table["N"] + 1))


def test_correlated_tokens_depart_from_independence():
    rng = np.random.default_rng(1)
    p, stay, n = 0.5, 0.8, 60_000
    hits = markov_hits(rng, n, p, stay)
    stats = TokenStats.from_ranks(np.where(hits, 1, 7), 50, doc=np.repeat(np.arange(300), 200))
    table = emergence.sequence_table({"m": (1e8, stats)}, ns=(2, 5), ks=(1,), n_boot=200, seed=0)
    rbp = hits.mean()
    for n_win, row in zip((2, 5), table.itertuples(), strict=True):
        exact = p * stay ** (n_win - 1) / rbp**n_win  # run probability of the chain over RBP^N
        assert row.ratio == pytest.approx(exact, rel=0.08)
        assert row.ratio_low > 1.2 and row.ratio_low < row.ratio < row.ratio_high
    independent = TokenStats.from_ranks(
        np.where(rng.random(n) < p, 1, 7), 50, doc=np.repeat(np.arange(300), 200)
    )
    ind = emergence.sequence_table({"m": (1e8, independent)}, ns=(5,), ks=(1,), n_boot=200, seed=0).iloc[0]
    assert ind["ratio_low"] < 1 < ind["ratio_high"]


def power_law_runs(rng, sizes=(1e7, 1e8, 1e9, 1e10), alpha=0.1, prefactor=5.0, n=40_000):
    runs = []
    for i, S in enumerate(sizes):
        hit = rng.random(n) < np.exp(-prefactor * S**-alpha)
        ranks = np.where(hit, 1, rng.integers(2, 30, n))
        runs.append(Run("fam", f"m{i}", "c", S, TokenStats.from_ranks(ranks, 64, doc=np.arange(n) // 100)))
    return runs


def test_sequence_fits_recover_the_token_exponent():
    runs = power_law_runs(np.random.default_rng(2))
    table = emergence.sequence_table(runs, ns=(1, 2, 4), ks=(1,))
    fits = emergence.sequence_fits(table)
    assert len(fits) == 3 and np.all(fits["n_models"] == 4)
    np.testing.assert_allclose(fits["alpha"], fits["alpha_token"], atol=0.01)
    np.testing.assert_allclose(fits["alpha_joint"], 0.1, atol=0.01)
    np.testing.assert_allclose(fits["C"], 5.0, rtol=0.15)  # C is flat in N under independence
    assert fits["r2_joint"].iloc[0] > 0.99


def test_fitted_sigmoids():
    S = np.geomspace(1e6, 1e30, 400)
    # In log S every curve is the same sigmoid, shifted right by ln(N)/alpha: a larger N makes
    # the rise happen later, which is what looks like a sudden emergence on a linear scale.
    mid = []
    for n in (1, 10, 100):
        p = np.exp(-emergence.sequence_law(5.0, 0.1, n, S))
        np.testing.assert_allclose(p, np.exp(-n * 5.0 * S**-0.1), rtol=1e-12)
        assert np.all(np.diff(p) > 0)
        mid.append(np.interp(0.5, p, np.log(S)))
    np.testing.assert_allclose(np.diff(mid), np.log(10) / 0.1, rtol=1e-3)


def _stats_from_hits(hits: np.ndarray, doc: np.ndarray) -> TokenStats:
    return TokenStats.from_ranks(np.where(hits, 1, 2), 10, doc=doc)


def test_matched_baselines_hand_computed():
    # Two documents of four tokens: hits 1101 and 0110; N = 2, k = 1.
    hits = np.array([1, 1, 0, 1, 0, 1, 1, 0], dtype=bool)
    doc = np.repeat([0, 1], 4)
    out = emergence.sequence_table({"m": (1.0, _stats_from_hits(hits, doc))}, ns=[2], ks=[1]).iloc[0]
    # 6 windows, successes: (0,1) in doc 0, (1,2) in doc 1 -> 2/6.
    assert out["p_empirical"] == pytest.approx(2 / 6)
    assert out["ratio"] == pytest.approx((2 / 6) / (5 / 8) ** 2)
    # Permutation within a document: P(two given slots both hits) = h(h-1) / (n(n-1)).
    perm = (3 * (3 * 2) / (4 * 3) + 3 * (2 * 1) / (4 * 3)) / 6
    assert out["p_doc_permuted"] == pytest.approx(perm)
    assert out["ratio_doc"] == pytest.approx((2 / 6) / perm)
    # Position-matched: hit rates by position 1/2, 1, 1/2, 1/2; windows (0,1) (1,2) (2,3) per doc.
    rate = np.array([0.5, 1.0, 0.5, 0.5])
    posm = 2 * (rate[0] * rate[1] + rate[1] * rate[2] + rate[2] * rate[3]) / 6
    assert out["p_position"] == pytest.approx(posm)
    assert out["ratio_position"] == pytest.approx((2 / 6) / posm)


def test_position_difficulty_alone_is_not_dependence():
    # The example: independent tokens, hit rate 0.2 at positions 0-4 and 0.6 after.
    rng = np.random.default_rng(0)
    n_docs, length = 2000, 40
    pos, doc = np.tile(np.arange(length), n_docs), np.repeat(np.arange(n_docs), length)
    hits = rng.random(len(pos)) < np.where(pos < 5, 0.2, 0.6)
    out = emergence.sequence_table({"m": (1.0, _stats_from_hits(hits, doc))}, ns=[4, 8], ks=[1], n_boot=200)
    assert np.all(out["ratio"] > 1.2)  # the naive ratio reads position difficulty as clustering
    assert np.all(out["ratio_position_low"] <= 1) and np.all(out["ratio_position_high"] >= 1)
    assert np.allclose(out["ratio_position"], 1, atol=0.1)


def test_document_difficulty_alone_is_not_dependence():
    rng = np.random.default_rng(1)
    n_docs, length = 1000, 40
    doc = np.repeat(np.arange(n_docs), length)
    hits = rng.random(len(doc)) < rng.choice([0.2, 0.8], n_docs)[doc]
    out = emergence.sequence_table({"m": (1.0, _stats_from_hits(hits, doc))}, ns=[4], ks=[1], n_boot=200)
    assert out["ratio"].iloc[0] > 2 and out["ratio_position"].iloc[0] > 2
    assert out["ratio_doc_low"].iloc[0] <= 1 <= out["ratio_doc_high"].iloc[0]


def test_sequence_law_range_limits() -> None:
    # alpha = 0.5, C = 100: p = exp(-100 N / sqrt(S)) reaches 0.95 at S = (100 N / 0.0513)^2.
    # Measured 1e4..1e6: down to p_{4} = 0.01 at S ~ 7.5e3, up to p_{1} = 0.95 at S ~ 3.8e6.
    law_range = emergence.sequence_law_range
    lo, hi = law_range(1e4, 1e6, 0.5, 100.0, [1, 4], decades=20)
    assert hi == pytest.approx((100 / -np.log(0.95)) ** 2)
    assert lo == pytest.approx((400 / -np.log(0.01)) ** 2)
    assert law_range(1e3, 1e6, 0.5, 100.0, [1, 4]) == (1e3, pytest.approx(hi))  # never inside
    capped = law_range(1e4, 1e6, 0.5, 100.0, [1, 4], decades=0.1)  # at most 0.1 decades out
    assert capped == (pytest.approx(10**3.9), pytest.approx(10**6.1))
    assert law_range(1e2, 1e4, -0.1, 100.0, [1]) == (1e2, 1e4)  # no rising law: nothing drawn
