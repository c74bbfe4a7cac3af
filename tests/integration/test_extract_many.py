"""extract_many: a models x corpora grid through the cache, settings given once."""

from __future__ import annotations

import pytest

from rbplab.catalog import CorpusError
from rbplab.core import ExtractionSettings
from rbplab.extraction import extract, extract_many
from rbplab.store import list_entries

SETTINGS = ExtractionSettings(context_length=32, max_tokens=60)


def test_grid_extracts_once_then_hits(gpt2_dir, neox_dir, tiny_corpus, cache_dir):
    models = {"gpt2": str(gpt2_dir), "neox": str(neox_dir)}
    seen = []
    first = extract_many(
        models, [tiny_corpus], SETTINGS, cache_dir=cache_dir, progress=False, on_result=seen.append
    )
    assert list(first["model"]) == ["gpt2", "neox"] and list(first["corpus"]) == ["tiny", "tiny"]
    assert not first["from_cache"].any() and (first["n_tokens"] == 60).all() and len(seen) == 2
    again = extract_many(models, [tiny_corpus], SETTINGS, cache_dir=cache_dir, progress=False)
    assert again["from_cache"].all() and list(again["key"]) == list(first["key"])
    # The same run through extract with keyword settings keys identically.
    single = extract(
        str(gpt2_dir), tiny_corpus, cache_dir=cache_dir, progress=False, context_length=32, max_tokens=60
    )
    assert single.from_cache and single.key == first["key"].iloc[0]


def test_bad_corpus_fails_before_any_model_runs(gpt2_dir, cache_dir, tmp_path):
    with pytest.raises(CorpusError, match="unknown corpus"):
        extract_many([str(gpt2_dir)], [str(tmp_path / "missing.jsonl")], SETTINGS, cache_dir=cache_dir)
    assert list_entries(cache_dir).empty


def test_unknown_setting_is_refused_before_work(gpt2_dir, tiny_corpus, cache_dir):
    with pytest.raises(ValueError, match="unknown extraction setting"):
        extract_many([str(gpt2_dir)], [tiny_corpus], cache_dir=cache_dir, max_token=5)
    assert list_entries(cache_dir).empty
