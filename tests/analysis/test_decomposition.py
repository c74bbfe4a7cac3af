"""The error-entropy decomposition CE = EE + SA - Conf and MRR, against numpy written here.

The reference works token by token from the per-token statistics (an "expected" tied token is
expanded into e rows of weight 1/e), never through the rank pairs the package reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rbplab.analysis import decomposition as dc
from rbplab.analysis import decomposition_bootstrap as dcb
from rbplab.analysis import fit, metrics
from rbplab.core import TokenStats
from rbplab.core.stats import summarize
from rbplab.grid import Grid
from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.study import decomposition, load_study
from rbplab.study.synthetic import synthetic_study

TIES = ("pessimistic", "optimistic", "expected")
MICRO = ["micro-1-25K", "micro-3-200K", "micro-5-1.2M"]
SETTINGS = {"max_tokens": 6000, "shard_tokens": 2048, "context_length": 256}


def _tied_stats(seed: int = 0, n: int = 20_000, vocab: int = 1_500) -> TokenStats:
    """Lognormal-ish ranks with ties on ~20 % of tokens (up to 6 tokens tied)."""
    rng = np.random.default_rng(seed)
    greater = np.minimum(np.floor(np.exp(rng.normal(1.0, 2.0, n))).astype(np.int64), vocab - 7)
    equal = np.where(rng.random(n) < 0.2, rng.integers(2, 7, n), 1)
    nll = 0.2 + 0.8 * np.log1p(greater) + rng.exponential(0.4, n)
    doc = np.sort(rng.integers(0, 30, n))
    position = np.concatenate([np.arange((doc == d).sum()) for d in range(30)])
    return TokenStats(doc, position, greater, equal, nll, vocab)


def _reference(stats: TokenStats, ties: str) -> dict[str, float]:
    """EE, SA, Conf, CE token by token, in plain numpy."""
    g, e, nll = stats.n_greater, stats.n_equal, stats.nll
    if ties == "pessimistic":
        rbe, w, tok_nll = g + e - 1, np.ones(len(g)), nll
    elif ties == "optimistic":
        rbe, w, tok_nll = g, np.ones(len(g)), nll
    else:  # each token spread over g..g+e-1, weight 1/e on each
        reps = e
        rbe = np.repeat(g, reps) + np.concatenate([np.arange(k) for k in reps])
        w = np.repeat(1.0 / e, reps)
        tok_nll = np.repeat(nll, reps)
    values = np.unique(rbe)
    p = np.array([w[rbe == v].sum() for v in values]) / w.sum()
    log_q_raw = np.array([-(w[rbe == v] * tok_nll[rbe == v]).sum() / w[rbe == v].sum() for v in values])
    c = np.exp(log_q_raw).sum()
    q = np.exp(log_q_raw) / c
    ee = -(p * np.log(p)).sum()
    return {
        "ee": ee,
        "sa": (p * np.log(p / q)).sum(),
        "conf": np.log(c),
        "ce": nll.mean(),
        "n_rbe": len(values),
        "ee_mm": ee + (len(values) - 1) / (2 * len(nll)),
    }


def _mrr_brute(stats: TokenStats, ties: str) -> float:
    """Mean of 1/rank; "expected" averages 1/r over every tie-breaking rank r = g+1..g+e."""
    g, e = stats.n_greater, stats.n_equal
    if ties == "pessimistic":
        return float(np.mean(1.0 / (g + e)))
    if ties == "optimistic":
        return float(np.mean(1.0 / (g + 1)))
    return float(
        np.mean([np.mean(1.0 / np.arange(gi + 1, gi + ei + 1)) for gi, ei in zip(g, e, strict=True)])
    )


@pytest.fixture(scope="module")
def cached_runs(tmp_path_factory) -> list[tuple[TokenStats, object]]:
    """Three micro models on humaneval through the real pipeline: (tokens, summary read back)."""
    root: Path = tmp_path_factory.mktemp("decomposition") / "cache"
    study = load_study(
        Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root, extract=True
    )
    entries = [CacheEntry.open(key, root) for key in list_entries(root)["key"]]
    assert len(entries) == len(MICRO) == len(study.runs)
    return [(entry.read_stats(), entry.summary()) for entry in entries]


@pytest.mark.parametrize("ties", TIES)
def test_identity_on_real_cached_stats_matches_numpy(cached_runs, ties):
    for stats, summary in cached_runs:
        ref = _reference(stats, ties)
        got = dc.decompose(summary, ties)  # from the summary file: no token read
        assert ref["ee"] + ref["sa"] - ref["conf"] == pytest.approx(ref["ce"], abs=1e-12)
        assert got.ce == pytest.approx(ref["ce"], abs=1e-12)
        for name in ("ee", "sa", "conf"):
            assert getattr(got, name) == pytest.approx(ref[name], rel=1e-10, abs=1e-12), name
        assert got.ee_miller_madow == pytest.approx(ref["ee_mm"], rel=1e-12)
        assert got.n_rbe == ref["n_rbe"]
        assert got.n_tokens == len(stats)
        assert abs(got.residual) < 1e-12


@pytest.mark.parametrize("ties", TIES)
def test_identity_with_many_ties(ties):
    stats = _tied_stats()
    ref = _reference(stats, ties)
    for data in (stats, summarize(stats)):
        got = dc.decompose(data, ties)
        for name in ("ee", "sa", "conf", "ce"):
            assert getattr(got, name) == pytest.approx(ref[name], rel=1e-10, abs=1e-12), name
        assert got.n_rbe == ref["n_rbe"]
    # the conventions differ when tokens are tied (the test would not notice a mixed-up rule otherwise)
    assert len({round(dc.decompose(stats, t).ee, 9) for t in TIES}) == 3


def test_error_entropy_of_a_known_distribution():
    """RBE uniform on 0..m-1 in equal counts has entropy log m; geometric RBE has the closed form."""
    m, per = 64, 500
    greater = np.repeat(np.arange(m), per)
    n = len(greater)
    stats = TokenStats.from_ranks(greater + 1, 4096, nll=np.full(n, 2.0))
    d = dc.decompose(stats, "optimistic")
    assert d.ee == pytest.approx(np.log(m), rel=1e-12)
    assert d.ee_miller_madow == pytest.approx(np.log(m) + (m - 1) / (2 * n), rel=1e-12)
    # every Q_e equal: q uniform = p, so SA = 0 and Conf = log(m e^-2)
    assert d.sa == pytest.approx(0.0, abs=1e-12)
    assert d.conf == pytest.approx(np.log(m) - 2.0, rel=1e-12)

    # geometric(theta) on 0, 1, ...: H = (-(1-t) log(1-t) - t log t) / (1-t) with t the success
    # prob 1 - theta; a large sample's plug-in EE is within a few standard errors, and Miller-Madow
    # moves it towards the truth.
    rng = np.random.default_rng(3)
    theta = 0.7
    sample = rng.geometric(1 - theta, 400_000) - 1
    h = (-(1 - theta) * np.log(1 - theta) - theta * np.log(theta)) / (1 - theta)
    geo = TokenStats.from_ranks(np.minimum(sample, 4000) + 1, 5000, nll=np.ones(len(sample)))
    est = dc.decompose(geo, "optimistic")
    assert est.ee == pytest.approx(h, abs=0.01)
    assert abs(est.ee_miller_madow - h) <= abs(est.ee - h) + 1e-4


@pytest.mark.parametrize("ties", TIES)
def test_mrr_against_brute_force(ties):
    stats = _tied_stats(seed=1, n=3000)
    want = _mrr_brute(stats, ties)
    assert dc.mean_reciprocal_rank(stats, ties) == pytest.approx(want, rel=1e-12)
    assert dc.mean_reciprocal_rank(summarize(stats), ties) == pytest.approx(want, rel=1e-12)


def test_metrics_table_rows_feed_the_fits():
    study = synthetic_study(sizes=(1e5, 1e6, 1e7, 1e8), corpora=("a",), n_tokens=8000)
    table = metrics.metrics_table(study.runs, ks=[1, 10], decomposition=True)
    rows = table[table["metric"].isin(dc.DECOMPOSITION_METRICS)]
    assert len(rows) == len(dc.DECOMPOSITION_METRICS) * len(study.runs)
    run = study.runs[0]
    mine = rows[rows["model"] == run.model].set_index("metric")
    assert mine.loc["ee", "value"] == pytest.approx(_reference(run.stats, "pessimistic")["ee"], rel=1e-10)
    assert mine.loc["mrr", "loss"] == pytest.approx(-np.log(_mrr_brute(run.stats, "pessimistic")), rel=1e-10)
    fits = fit.scaling_fits(table)
    ee = fits[fits["metric"] == "ee"].iloc[0]
    # the same OLS written here: log EE on log S
    x = np.log(rows[rows["metric"] == "ee"]["S"].to_numpy())
    y = np.log(rows[rows["metric"] == "ee"]["loss"].to_numpy())
    assert ee["alpha"] == pytest.approx(-np.polyfit(x, y, 1)[0], rel=1e-10)


def test_study_decomposition_columns_and_identity():
    study = synthetic_study(sizes=(1e5, 1e6, 1e7), corpora=("a", "b"), n_tokens=5000)
    table = decomposition.table(study, "expected")
    assert len(table) == len(study.runs)
    assert {"n_tokens", "n_rbe", "ce", "ee", "ee_mm", "sa", "conf", "mrr"} <= set(table.columns)
    assert np.allclose(table["ce"], table["ee"] + table["sa"] - table["conf"], atol=1e-12)
    fits = decomposition.fits(study)
    assert set(fits["metric"]) == {"ce", *dc.DECOMPOSITION_METRICS}


@pytest.mark.parametrize("ties", TIES)
def test_bootstrap_replicate_is_the_decomposition_of_the_resampled_corpus(ties):
    """A replicate with document weights w equals the decomposition (numpy, token by token) of the
    corpus in which document d appears w[d] times."""
    stats = _tied_stats(seed=2, n=6000)
    table = dcb.doc_rbe(stats, ties)
    rng = np.random.default_rng(5)
    w = np.bincount(rng.integers(0, stats.n_docs, stats.n_docs), minlength=stats.n_docs)
    got = table.evaluate(w[None, :].astype(float))
    keep = np.repeat(np.arange(len(stats)), w[stats.doc])  # each token repeated w[its doc] times
    resampled = TokenStats(
        np.sort(stats.doc[keep]),
        np.arange(len(keep)),
        stats.n_greater[keep],
        stats.n_equal[keep],
        stats.nll[keep],
        stats.vocab_size,
    )
    ref = _reference(resampled, ties)
    for name in ("ee", "sa", "conf", "ee_mm"):
        assert got[name][0] == pytest.approx(ref[name], rel=1e-9), name
    assert got["mrr"][0] == pytest.approx(_mrr_brute(resampled, ties), rel=1e-9)


def test_study_decomposition_bootstrap_covers_the_point_exponent():
    study = synthetic_study(sizes=(1e5, 1e6, 1e7, 1e8), corpora=("a",), n_tokens=6000)
    boot = decomposition.bootstrap(study, n_boot=40).set_index("metric")
    fits = decomposition.fits(study).set_index("metric")
    for name in ("ee", "mrr"):
        assert boot.loc[name, "alpha"] == pytest.approx(fits.loc[name, "alpha"], rel=1e-9)
        assert boot.loc[name, "alpha_boot_low"] < boot.loc[name, "alpha"] < boot.loc[name, "alpha_boot_high"]
        assert boot.loc[name, "n_boot_valid"] == 40
