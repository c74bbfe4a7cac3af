"""Document (cluster) bootstrap: per-document statistics, shared resamples, intervals."""

import numpy as np
import pytest
from helpers.factories import random_stats

from rbplab.analysis import metrics
from rbplab.core.stats import TIES, TokenStats


def test_doc_stats_reproduce_point_estimates():
    stats = random_stats(np.random.default_rng(4))
    ks = np.array([1, 5, 20, 100, 190])
    for ties in TIES:
        docs = metrics.doc_stats(stats, ks, ties, n_docs=stats.n_docs + 3)  # padding docs are empty
        out = docs.evaluate(np.ones(docs.n_docs))
        np.testing.assert_allclose(out["rbp"][0], metrics.rbp(stats, ks, ties), atol=1e-12)
        assert out["ce"][0] == pytest.approx(metrics.cross_entropy(stats))
    with pytest.raises(ValueError, match="n_docs"):
        metrics.doc_stats(stats, ks, n_docs=2)


def test_bootstrap_weights_are_resamples_and_reproducible():
    w = metrics.bootstrap_weights(50, 300, seed=7)
    assert w.shape == (300, 50) and np.all(w.sum(axis=1) == 50)
    assert w.mean() == pytest.approx(1.0, abs=0.02)
    np.testing.assert_array_equal(w, metrics.bootstrap_weights(50, 300, seed=7))
    blocks = np.concatenate(list(metrics.weight_chunks(50, 300, 7)))
    np.testing.assert_array_equal(w, blocks)


def test_shared_resamples_pair_models():
    stats = random_stats(np.random.default_rng(5))
    d = metrics.doc_stats(stats, [1, 10])
    a, b = metrics.replicate_arrays([d, d], 40, seed=3)
    np.testing.assert_array_equal(a["rbp"], b["rbp"])
    with pytest.raises(ValueError, match="document count"):
        metrics.replicate_arrays([d, metrics.doc_stats(stats, [1, 10], n_docs=99)], 5)


def clustered_stats(rng, n_docs, per_doc, spread):
    """RBP_1 varies between documents: a doc's hit rate is logistic(N(0, spread))."""
    rate = 1 / (1 + np.exp(-rng.normal(0, spread, n_docs)))
    doc = np.repeat(np.arange(n_docs), per_doc)
    hit = rng.random(len(doc)) < rate[doc]
    return TokenStats.from_ranks(np.where(hit, 1, 7), 10, doc=doc, nll=np.where(hit, 0.2, 3.0))


def test_cluster_bootstrap_tracks_true_sampling_error():
    rng = np.random.default_rng(6)
    n_docs, per_doc = 60, 50
    for spread, cluster_gt_token in ((2.0, True), (0.0, False)):
        true_sd = np.std([metrics.rbp(clustered_stats(rng, n_docs, per_doc, spread), 1) for _ in range(300)])
        stats = clustered_stats(rng, n_docs, per_doc, spread)
        doc_se = metrics.bootstrap_ci(stats, [1], n_boot=400, seed=1).iloc[0]["se"]
        tok_se = metrics.bootstrap_ci(stats, [1], n_boot=400, seed=1, unit="token").iloc[0]["se"]
        assert 0.7 < doc_se / true_sd < 1.4
        if cluster_gt_token:
            assert doc_se > 2.5 * tok_se  # token resampling badly understates the error
        else:
            assert 0.8 < doc_se / tok_se < 1.25


def test_bootstrap_tables():
    stats = clustered_stats(np.random.default_rng(8), 40, 20, 1.0)
    ci = metrics.bootstrap_ci(stats, [1, 5], n_boot=200, seed=2)
    assert list(ci.columns) == [
        "metric",
        "k",
        "estimate",
        "se",
        "estimate_low",
        "estimate_high",
        "n_boot",
        "unit",
    ]
    assert np.all((ci["estimate_low"] <= ci["estimate"]) & (ci["estimate"] <= ci["estimate_high"]))
    with pytest.raises(ValueError, match="unit"):
        metrics.bootstrap_ci(stats, [1], unit="sentence")
