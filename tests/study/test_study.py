"""rbplab.study.study: tables from precomputed curves agree with direct computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import fit
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats
from rbplab.grid import Grid
from rbplab.study import Study, emergence, load_study, size, synthetic_study

SIZES = (1e4, 1e5, 1e6, 1e7)
ALPHA, A = 0.15, 3.0


def power_law_stats(S: float, vocab: int = 512, n: int = 40_000, seed: int = 0) -> TokenStats:
    """Ranks with RBP_1 = exp(-A S^-ALPHA) exactly (up to rounding) and the rest spread over 2..vocab."""
    rng = np.random.default_rng(seed)
    n_top = int(round(n * np.exp(-A * S**-ALPHA)))
    ranks = np.r_[np.ones(n_top, dtype=np.int64), rng.integers(2, vocab + 1, n - n_top)]
    rng.shuffle(ranks)
    doc = np.repeat(np.arange(40), n // 40)
    return TokenStats.from_ranks(ranks, vocab, doc=doc, nll=np.log(ranks) + 0.1)


@pytest.fixture(scope="module")
def law() -> Study:
    return Study(
        [Run("law", f"m{i}", "c", float(S), power_law_stats(S, seed=i)) for i, S in enumerate(SIZES)]
    )


@pytest.fixture(scope="module")
def synth() -> Study:
    return synthetic_study(n_tokens=4000, corpora=("a", "b"))


def test_points_match_direct_rank_counts(synth: Study) -> None:
    points = synth.points([1, 7, 300])
    assert len(points) == len(synth.runs) * 3
    for run in synth.runs:
        rank = run.stats.rank("pessimistic")
        sel = points[(points["model"] == run.model) & (points["corpus"] == run.corpus)]
        for k, value in zip(sel["k"], sel["rbp"], strict=True):
            assert value == pytest.approx(np.mean(rank <= k))
        assert np.allclose(sel["neg_log_rbp"], -np.log(sel["rbp"]))


def test_points_with_bootstrap_intervals(synth: Study) -> None:
    plain = synth.points([1, 10], corpora=["a"])
    boot = synth.points([1, 10], corpora=["a"], n_boot=50)
    assert np.allclose(boot["neg_log_rbp"], plain["neg_log_rbp"])
    assert (boot["neg_log_rbp_low"] <= boot["neg_log_rbp"]).all() and (
        boot["neg_log_rbp"] <= boot["neg_log_rbp_high"]
    ).all()
    assert (boot["neg_log_rbp_high"] > boot["neg_log_rbp_low"]).all()


def test_fit_recovers_known_exponent(law: Study) -> None:
    fits = size.fits(law, [1])
    assert len(fits) == 1
    assert fits["alpha"].iloc[0] == pytest.approx(ALPHA, abs=0.01)
    assert fits["r2"].iloc[0] > 0.99
    table = size.fit_table(law, [1, 10])
    assert list(table["k"]) == [1, 10]
    assert {"alpha", "alpha_low", "alpha_high", "r2"} <= set(table.columns)


def test_bands_bracket_the_fitted_line(law: Study) -> None:
    bands = size.bands(law, [1, 5])
    assert set(bands["k"]) == {1, 5}
    assert (bands["fit_low"] <= bands["fit"]).all() and (bands["fit"] <= bands["fit_high"]).all()
    assert bands["S"].min() == pytest.approx(min(SIZES)) and bands["S"].max() == pytest.approx(max(SIZES))
    line = fit.fit_power_law(SIZES, law.points(1)["neg_log_rbp"])
    first = bands[bands["k"] == 1].iloc[0]
    assert first["fit"] == pytest.approx(line.predict(first["S"]))
    wide = size.bands(law, [1], kind="prediction")
    assert np.allclose(wide["fit_low"], line.prediction_interval(wide["S"])[0])
    conf = bands[bands["k"] == 1]
    assert (
        wide["fit_high"].to_numpy() > conf["fit_high"].to_numpy()
    ).all()  # a new model scatters more than the line
    # the confidence band is narrowest at the centre of log S, as for any OLS line
    width = np.log(conf["fit_high"] / conf["fit_low"]).to_numpy()
    assert width.argmin() in range(len(width) // 2 - 3, len(width) // 2 + 3)
    with pytest.raises(ValueError, match="kind"):
        size.bands(law, [1], kind="bootstrap")


def test_subset_shares_curves_and_filters(synth: Study) -> None:
    sub = synth.subset(corpora="b")
    assert sub.corpora == ["b"]
    assert sub.curves is synth.curves  # no recomputation of rank histograms
    assert synth.subset(corpora="b") is sub  # cached
    with pytest.raises(ValueError, match="unknown corpus"):
        synth.subset(corpora="nope")


def test_multi_family_vocab_and_models() -> None:
    a = synthetic_study(n_tokens=2000, corpora=("c",), family="fa", vocab_size=1000)
    b = synthetic_study(n_tokens=2000, corpora=("c",), family="fb", vocab_size=3000, sizes=(1e6, 1e7, 1e8))
    both = Study(a.runs + b.runs)
    assert both.families == ["fa", "fb"]
    assert both.vocab_size == 1000
    assert both.subset(families="fb").vocab_size == 3000
    assert list(both.models.groupby("family").size()) == [6, 3]
    assert set(size.fits(both, [1])["family"]) == {"fa", "fb"}


def test_bad_inputs() -> None:
    s = power_law_stats(1e5, n=400)
    with pytest.raises(ValueError, match="at least one run"):
        Study([])
    with pytest.raises(ValueError, match="ties"):
        Study([Run("f", "m", "c", 1.0, s)], ties="random")
    study = Study([Run("f", "m", "c", 1.0, s)])
    with pytest.raises(ValueError, match="vocab_size"):
        study.points([0])


def test_emergence_table(synth: Study) -> None:
    em = emergence.table(synth, [1, 10], [1, 3], corpora=["a"])
    assert set(em["corpus"]) == {"a"} and set(em["N"]) == {1, 3}
    assert np.allclose(em["p_pred"], em["rbp"] ** em["N"])
    one = em[em["N"] == 1]
    assert np.allclose(one["p_emp"], one["rbp"])  # a window of one token is one token
    assert np.allclose(em["x"], em["N"] * em["S"] ** -em["alpha"])
    assert em["p_fit"].between(0, 1).all()


def test_summary_and_extrapolation(synth: Study) -> None:
    summary = synth.run_table()
    assert len(summary) == len(synth.runs)
    run = synth.runs[0]
    assert summary["ce"].iloc[0] == pytest.approx(float(np.mean(run.stats.nll)))
    extra = size.extrapolation(synth, [1])
    assert set(extra["model"]) == {"synthetic-5"}  # the largest model is predicted
    sweep = size.ksweep(synth, ks=[1, 10, 100])
    assert set(sweep["regime"]) <= {"k=1", "moderate", "intermediate", "large"}


def test_synthetic_studies_are_routed_explicitly_and_load_study_errors() -> None:
    # Made-up studies come from synthetic_study, never from a magic family name in a grid.
    s = synthetic_study(corpora=["x", "y"], n_tokens=1000)
    assert s.corpora == ["x", "y"] and len(s.runs[0].stats) == 1000
    with pytest.raises(ValueError, match="at least one model family"):
        Grid.from_names([])
    with pytest.raises(ValueError, match="unknown model family 'synthetic'"):
        Grid.from_names(["synthetic", "micro"])


def test_load_study_unknown_family_lists_known() -> None:
    pytest.importorskip("rbplab.extraction.pipeline")
    with pytest.raises(ValueError, match="known families"):
        Grid.from_names("no-such-family")


@pytest.mark.parametrize("given", ["micro", ["micro"], "study.toml", {"families": ["micro"]}])
def test_load_study_takes_a_grid_and_says_how_to_make_one(given, tmp_path) -> None:
    """Names, a path or a table are not guessed at: one line naming both constructors."""
    with pytest.raises(
        TypeError, match=r"load_study takes a rbplab.grid.Grid.*Grid.from_names.*Grid.read"
    ) as err:
        load_study(given, cache_dir=tmp_path)
    assert "\n" not in str(err.value) and not any(tmp_path.iterdir())


def test_load_study_takes_a_grid_or_entries(tmp_path) -> None:
    grid = Grid.from_names("micro-1-25K", "prose")
    with pytest.raises(ValueError, match="a grid or entries=, not both"):
        load_study(grid, entries=["0" * 64], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="extract=True needs a grid"):
        load_study(entries=["0" * 64], cache_dir=tmp_path, extract=True)


def test_points_frame_is_tidy(synth: Study) -> None:
    points = synth.points(1)
    assert list(points.columns) == ["family", "corpus", "model", "S", "k", "rbp", "neg_log_rbp", "n_tokens"]
    assert isinstance(points, pd.DataFrame) and points["k"].dtype.kind == "i"


def test_load_study_reads_through_the_extraction_cache(
    monkeypatch: pytest.MonkeyPatch, gpt2_dir, neox_dir, tiny_corpus, cache_dir
) -> None:
    """The real path: registry family -> extract (first call) -> cache -> TokenStats (later calls)."""
    from rbplab.catalog import registry
    from rbplab.extraction import pipeline as extract
    from rbplab.extraction.reading import load_stats
    from rbplab.store.cache import admin as cache_admin

    members = pd.DataFrame(
        {
            "family": ["tiny", "tiny"],
            "model": ["tiny-gpt2", "tiny-neox"],
            "source": [str(gpt2_dir), str(neox_dir)],
            "S": [1000, 4000],
        }
    )
    monkeypatch.setattr(registry, "family_models", lambda family: members)

    def lookup(name):  # the registry as a whole holds the family too, found by name or source
        found = members[(members["model"] == name) | (members["source"] == name)]
        return None if found.empty else found.iloc[0]

    monkeypatch.setattr(registry, "lookup_model", lookup)
    lines: list[str] = []
    study = load_study(
        Grid.from_names("tiny", tiny_corpus), cache_dir=cache_dir, progress=lines.append, extract=True
    )
    assert lines == ["tiny/tiny-gpt2 on tiny", "tiny/tiny-neox on tiny"]
    assert study.corpora == ["tiny"] and list(study.models["S"]) == [1000, 4000]
    direct = load_stats(str(gpt2_dir), tiny_corpus, cache_dir=cache_dir, progress=False)
    assert np.array_equal(study.stats("tiny-gpt2", "tiny").rank(), direct.rank())
    assert len(cache_admin.list_entries(cache_dir)) == 2

    def no_forward(*args, **kwargs):
        raise AssertionError("a cached study must not load model weights")

    monkeypatch.setattr(extract, "load_weights", no_forward)
    again = load_study(Grid.from_names("tiny", tiny_corpus, models=["tiny-neox"]), cache_dir=cache_dir)
    assert np.array_equal(again.stats("tiny-neox", "tiny").nll, study.stats("tiny-neox", "tiny").nll)
    with pytest.raises(ValueError, match="not in families"):
        load_study(Grid.from_names("tiny", tiny_corpus, models=["gpt5"]), cache_dir=cache_dir)


def test_synthetic_generator_is_the_packages_own_lognormal():
    from rbplab.analysis.lognormal import fit_lognormal
    from rbplab.study.synthetic import synthetic_study

    study = synthetic_study(corpora=("synthetic-a",), n_tokens=40_000)
    fits = [fit_lognormal(r.stats).params for r in study.runs]
    sigmas = np.array([f["sigma"] for f in fits])
    assert np.all(np.abs(sigmas - 2.0) < 0.1)  # the generator has no sigma trend; neither does the fit
    slope = np.polyfit(np.log([r.S for r in study.runs]), sigmas, 1)[0]
    assert abs(slope) < 0.01
    mus = np.array([f["mu"] for f in fits])
    expected = 2.5 - 0.25 * np.log(np.array([r.S for r in study.runs]) / 1e5)
    np.testing.assert_allclose(mus, expected, atol=0.1)
