"""rbplab.extract: a models x corpora grid through the cache, settings given once."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.extraction import extract_run

import rbplab
from rbplab.catalog.corpora import CorpusError
from rbplab.core import ExtractionSettings
from rbplab.grid import Grid
from rbplab.store import list_entries

SETTINGS = ExtractionSettings(context_length=32, max_tokens=60)


def test_grid_extracts_once_then_hits(gpt2_dir, neox_dir, tiny_corpus, cache_dir):
    grid = Grid.from_names([str(gpt2_dir), str(neox_dir)], [tiny_corpus], SETTINGS)
    seen = []
    first = rbplab.extract(grid, cache_dir=cache_dir, progress=False, on_result=seen.append)
    assert [r.model for r in first] == grid.models and [r.corpus for r in first] == ["tiny", "tiny"]
    assert not any(r.from_cache for r in first) and all(r.n_tokens == 60 for r in first)
    assert seen == first
    again = rbplab.extract(grid, cache_dir=cache_dir, progress=False)
    assert all(r.from_cache for r in again) and [r.key for r in again] == [r.key for r in first]
    table = pd.DataFrame(again)  # the documented table: one row per run
    assert list(table["model"]) == grid.models and table["from_cache"].all()
    # The same run with keyword settings keys identically.
    single = extract_run(str(gpt2_dir), tiny_corpus, cache_dir=cache_dir, context_length=32, max_tokens=60)
    assert single.from_cache and single.key == first[0].key


def test_bad_corpus_fails_before_any_model_runs(gpt2_dir, cache_dir, tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus"):
        grid = Grid.from_names([str(gpt2_dir)], [str(tmp_path / "missing.jsonl")], SETTINGS)
        rbplab.extract(grid, cache_dir=cache_dir)
    assert list_entries(cache_dir).empty


def test_unknown_setting_is_refused_before_work(gpt2_dir, tiny_corpus, cache_dir):
    with pytest.raises(ValueError, match="unknown extraction setting"):
        rbplab.extract(Grid.from_names([str(gpt2_dir)], [tiny_corpus], max_token=5), cache_dir=cache_dir)
    assert list_entries(cache_dir).empty


@pytest.mark.parametrize("given", ["micro-1-25K", ["micro-1-25K"], "study.toml"])
def test_anything_but_a_grid_is_one_line_saying_how_to_make_one(given, cache_dir):
    with pytest.raises(TypeError, match=r"takes a rbplab.grid.Grid.*Grid.from_names.*Grid.read") as err:
        rbplab.extract(given, cache_dir=cache_dir)
    assert isinstance(err.value, rbplab.RbplabError) and "\n" not in str(err.value)
    assert not cache_dir.exists() or list_entries(cache_dir).empty
