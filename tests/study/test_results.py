"""The results file: written by save_results / the report, read back by rbplab.load_results."""

from __future__ import annotations

import json
import re
from importlib import metadata

import numpy as np
import pandas as pd
import pytest
from helpers.factories import one_token_entry
from helpers.hostile import deep_json, hostile_file, no_hang

import rbplab
from rbplab.study import size, synthetic_study, tables
from rbplab.study.results import RESULTS_VERSION, ResultsError, load_results, matching_keys, save_results


@pytest.fixture(scope="module")
def study():
    return synthetic_study(n_tokens=2000, corpora=("a", "b"))


def test_round_trip(study, tmp_path):
    path = save_results(
        study,
        tmp_path / "results.json",
        ks=[1, 10],
        settings={"max_tokens": 2000},
        find_keys=False,
        tables={"extra": pd.DataFrame({"x": [1.5, np.nan], "name": ["p", None]})},
        headlines={"01_rbp_vs_size": "α = 0.08 [0.07, 0.09]"},
    )
    document = json.loads(path.read_text())  # strict JSON: NaN is written as null
    assert document["format"] == "rbplab-results" and document["tables"]["extra"]["rows"][1] == [None, None]
    results = rbplab.load_results(path)
    assert results.grid["families"] == ["synthetic"] and results.grid["corpora"] == ["a", "b"]
    assert results.grid["ties"] == "pessimistic" and results.grid["level"] == 0.95
    assert results.settings["max_tokens"] == 2000 and results.settings["context_length"] is None
    assert results.versions["numpy"] == metadata.version("numpy") and results.versions["python"]
    fits = size.fit_table(study, [1, 10])
    back = results.table("fits")
    assert list(back.columns) == list(fits.columns)
    assert np.array_equal(back["alpha"].to_numpy(), fits["alpha"].to_numpy())  # every digit kept
    assert back["k"].tolist() == [1, 10, 1, 10]
    assert (
        results.runs[["model", "corpus"]].values.tolist()
        == study.run_table()[["model", "corpus"]].values.tolist()
    )
    assert results.headlines == {"01_rbp_vs_size": "α = 0.08 [0.07, 0.09]"}
    with pytest.raises(KeyError, match=r"they have \['extra', 'fits'\]"):
        results.table("ksweep")


def test_bad_files_are_one_line_errors(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ResultsError, match="cannot read results file"):
        load_results(missing)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ResultsError, match="is not JSON"):
        load_results(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"results": {}}')
    with pytest.raises(ResultsError, match="not an rbplab results file"):
        load_results(tmp_path / "other.json")
    (tmp_path / "newer.json").write_text('{"format": "rbplab-results", "version": 99}')
    with pytest.raises(ResultsError, match="version 99"):
        load_results(tmp_path / "newer.json")


GOOD = {"format": "rbplab-results", "version": RESULTS_VERSION}


@pytest.mark.parametrize(
    ("how", "told"),
    [
        ("deep", "is nested more than 64 levels deep"),
        ("/dev/zero", "is a character device, not a regular file"),
        ("fifo", "is a FIFO, not a regular file"),
        ("sparse 2 GiB", r"is larger than 256 MiB \(2,147,483,648 bytes\)"),
        ({**GOOD, "grid": [1]}, "field 'grid' is a list, expected an object"),
        ({**GOOD, "versions": "2.0"}, "field 'versions' is a string, expected an object"),
        ({**GOOD, "runs": {"columns": ["a"], "rows": "x"}}, "field 'runs.rows' is a string, expected a list"),
        ({**GOOD, "tables": {"fits": {"rows": []}}}, "field 'tables.fits.columns' is missing"),
        ({**GOOD, "headlines": {"a": 1}}, "field 'headlines.a' is an integer, expected a string"),
    ],
)
def test_a_hostile_results_file_is_one_line(how, told, tmp_path):
    """Each was a RecursionError, a MemoryError, a hang, an AttributeError, or accepted."""
    deep = '{"format": "rbplab-results", "version": 1, "grid": ' + deep_json(100_000) + "}"
    kinds = {"deep": ("text", deep), "sparse 2 GiB": ("sparse", "")}
    kind, text = kinds.get(how, (how, "")) if isinstance(how, str) else ("text", json.dumps(how))
    path = hostile_file(tmp_path / "results.json", kind, text=text)
    with no_hang(20), pytest.raises(ResultsError) as err:
        load_results(path)
    assert re.search(told, str(err.value)) and str(path) in str(err.value) and "\n" not in str(err.value)


def _entry(root, model, corpus, revision=None, max_tokens=None):
    spec = {
        "model": {"name": model, "revision": revision},
        "corpus": {"name": corpus},
        "max_tokens": max_tokens,
        "windows": {"context_length": 32},
    }
    return one_token_entry(root, spec).key


def test_cache_keys_only_when_one_entry_matches(tmp_path):
    full = _entry(tmp_path, "m1", "prose")
    capped = _entry(tmp_path, "m1", "prose", max_tokens=100)
    checkpoint = _entry(tmp_path, "m1", "prose", revision="step-10", max_tokens=100)
    runs = pd.DataFrame(
        {
            "model": ["m1", "m1@step-10", "m2"],
            "corpus": ["prose", "prose", "prose"],
            "revision": [None, "step-10", None],
        }
    )
    assert matching_keys(runs, {}, tmp_path) == [full, None, None]  # the uncapped settings
    assert matching_keys(runs, {"max_tokens": 100}, tmp_path) == [capped, checkpoint, None]
    assert matching_keys(runs, None, tmp_path) == [None, checkpoint, None]  # settings unknown: ambiguous


def test_save_and_tabulate_the_fit_table(study, tmp_path):
    path = rbplab.save_results(study, tmp_path / "study.json", ks=[1, 10], find_keys=False)
    back = rbplab.load_results(path).table("fits")
    fits = size.fit_table(study, [1, 10])
    assert np.array_equal(back["alpha"].to_numpy(), fits["alpha"].to_numpy())
    markdown = tables.to_markdown(fits)
    latex = tables.to_latex(fits, caption="fits")
    for row in fits.itertuples():
        half = (row.alpha_high - row.alpha_low) / 2  # an OLS t-interval: symmetric
        assert f"{row.alpha:.3f} ± {half:.3f}" in markdown
        assert f"${row.alpha:.3f} \\pm {half:.3f}$" in latex
    assert markdown.splitlines()[0].startswith("| family | corpus | k | α |")
    assert "\\caption{fits}" in latex and "alpha_low" not in markdown
    one_k = rbplab.save_results(study, tmp_path / "one_k.json", ks=10, find_keys=False)  # a single k
    assert rbplab.load_results(one_k).table("fits")["k"].tolist() == [10, 10]
