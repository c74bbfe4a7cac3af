"""A bad `ties` is one line from every public entry point, raised before any work (no cache is
read, no resample drawn), and each public call checks it once, not again in its helpers."""

from __future__ import annotations

import sys

import pytest

import rbplab
from rbplab.analysis import decomposition, emergence, fit, lognormal, metrics
from rbplab.core.errors import RbplabError
from rbplab.core.stats import check_ties
from rbplab.study import decomposition as study_decomposition
from rbplab.study.synthetic import synthetic_study

BAD = "random"
MESSAGE = r"^ties must be one of \('pessimistic', 'optimistic', 'expected'\), got 'random'$"


@pytest.fixture(scope="module")
def study():
    return synthetic_study(sizes=(1e5, 1e6, 1e7), corpora=("a",), n_tokens=1500, n_docs=10)


def _one_line(call) -> None:
    with pytest.raises(RbplabError, match=MESSAGE) as info:
        call()
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_a_bad_ties_is_one_line_from_the_analysis_functions(study) -> None:
    runs, stats = study.runs, study.runs[0].stats
    for call in (
        lambda: metrics.rbp_curve(stats, BAD),
        lambda: metrics.rbp(stats, [1, 10], BAD),
        lambda: metrics.run_metrics(stats, [1], BAD),
        lambda: metrics.metrics_table(runs, [1], BAD),
        lambda: metrics.bootstrap_ci(stats, [1], BAD, n_boot=10),
        lambda: fit.bootstrap_fits(runs, [1], BAD, n_boot=10),
        lambda: decomposition.decompose(stats, BAD),
        lambda: decomposition.mean_reciprocal_rank(stats, BAD),
        lambda: lognormal.fit_lognormal(stats, BAD),
        lambda: lognormal.compare_rank_distributions(stats, BAD),
        lambda: emergence.sequence_table(runs, ns=(2,), ks=(1,), ties=BAD),
        lambda: stats.rank(BAD),
    ):
        _one_line(call)


def test_a_bad_ties_is_one_line_from_the_study_and_its_loaders(study, tmp_path) -> None:
    _one_line(lambda: rbplab.study.Study(study.runs, ties=BAD))
    _one_line(lambda: study_decomposition.table(study, BAD))
    # before any cache is read or model planned: no entry, no corpus, no study file exists there
    empty = tmp_path / "no-cache"
    _one_line(lambda: rbplab.load_study("micro", cache_dir=empty, ties=BAD))
    _one_line(lambda: rbplab.load_study("micro", cache_dir=empty, ties=BAD, extract=True))
    _one_line(lambda: rbplab.load_study(entries=["0" * 64], cache_dir=empty, ties=BAD))
    _one_line(lambda: rbplab.load_study(tmp_path / "absent.toml", cache_dir=empty, ties=BAD))
    assert not empty.exists()


def test_each_public_call_checks_ties_once(study, monkeypatch) -> None:
    calls = []

    def counted(ties: str) -> str:
        calls.append(ties)
        return check_ties(ties)

    for module in [m for name, m in sys.modules.items() if name.startswith("rbplab")]:
        if getattr(module, "check_ties", None) is check_ties:  # every module that imported it
            monkeypatch.setattr(module, "check_ties", counted)
    runs, stats = study.runs, study.runs[0].stats
    for call in (
        lambda: rbplab.study.Study(runs),  # one rbp_curves for all its runs, not one check per run
        lambda: metrics.metrics_table(runs, [1, 10]),  # one, not one per run
        lambda: metrics.run_metrics(stats, [1], decomposition=True),
        lambda: metrics.bootstrap_ci(stats, [1], n_boot=10),
        lambda: fit.bootstrap_fits(runs, [1], n_boot=10),  # not once per run's document table
    ):
        calls.clear()
        call()
        assert calls == ["pessimistic"], call
