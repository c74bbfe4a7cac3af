"""A plan record names an entry; the model's size S is the entry's (its manifest's, written by the
process that scored the weights its key names), never the record's alone. A record whose S was
edited is ignored with a warning, the run is planned again (S derived from the config) and the
record is written again."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from rbplab.catalog.corpora import open_corpus
from rbplab.catalog.models import ModelSpec, resolve
from rbplab.core import ExtractionSettings
from rbplab.extraction import fingerprints
from rbplab.grid import Grid
from rbplab.study import load_study

SETTINGS = {"context_length": 32, "max_tokens": 60}


def test_an_edited_size_in_a_plan_record_is_ignored_and_written_again(tmp_path, gpt2_dir, tiny_corpus):
    model = str(shutil.copytree(gpt2_dir, tmp_path / "gpt2"))
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": str(d.id), "text": d.text}) + "\n" for d in tiny_corpus.documents)
    )
    cache = tmp_path / "cache"
    grid = Grid.from_names([model], str(corpus), **SETTINGS)
    S = float(load_study(grid, cache_dir=cache, extract=True).run_table()["S"].iloc[0])
    req = fingerprints.request(
        resolve(ModelSpec(model)), open_corpus(str(corpus)), ExtractionSettings(**SETTINGS)
    )
    path = fingerprints._record_path(cache, req)
    record = json.loads(path.read_text())
    assert record["n_nonembedding"] == S > 0
    path.write_text(json.dumps({**record, "n_nonembedding": record["n_nonembedding"] * 100}))

    with pytest.warns(UserWarning, match=r"plan record .* gives S = .* whose manifest records S = .*ignored"):
        study = load_study(grid, cache_dir=cache)
    assert study.run_table()["S"].tolist() == [S]
    assert json.loads(path.read_text())["n_nonembedding"] == S  # written again
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_study(grid, cache_dir=cache).run_table()["S"].tolist() == [S]
    assert not [w for w in caught if "plan record" in str(w.message)]  # the record holds again
