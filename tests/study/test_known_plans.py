"""Plan records: a warm cache is analysed without importing torch or transformers, and a record
that does not hold (another entry, changed model files, garbage) is ignored, never believed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from helpers.extraction import extract_run

from rbplab.catalog.corpora import open_corpus
from rbplab.catalog.models import ModelSpec, resolve
from rbplab.core import ExtractionSettings
from rbplab.extraction import fingerprints
from rbplab.extraction.fingerprints import PLANS_DIR, cpu_only, known_plan
from rbplab.grid import Grid
from rbplab.study import load_study

SETTINGS = {"context_length": 32, "max_tokens": 60}

READ = """
import json, sys
from rbplab.grid import Grid
from rbplab.study import load_study
models, corpus, cache = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
study = load_study(Grid.from_names(models, corpus, context_length=32, max_tokens=60), cache_dir=cache)
print(json.dumps({
    "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules),
    "runs": study.run_table().to_dict("list"),
}))
"""


@pytest.fixture
def setup(tmp_path, gpt2_dir, neox_dir, tiny_corpus):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": str(d.id), "text": d.text}) + "\n" for d in tiny_corpus.documents)
    )
    models = [
        str(shutil.copytree(gpt2_dir, tmp_path / "gpt2")),
        str(shutil.copytree(neox_dir, tmp_path / "neox")),
    ]
    return models, str(corpus), tmp_path / "cache"


def read_in_subprocess(models, corpus, cache) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", READ, json.dumps(models), corpus, str(cache)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_warm_cache_is_read_without_model_code(setup):
    models, corpus, cache = setup
    first = load_study(Grid.from_names(models, corpus, **SETTINGS), cache_dir=cache, extract=True)
    assert len(list((cache / PLANS_DIR).rglob("*.json"))) == 2
    again = read_in_subprocess(models, corpus, cache)
    assert again["heavy"] == []
    pd.testing.assert_frame_equal(pd.DataFrame(again["runs"]), first.run_table(), check_dtype=False)


def test_a_record_naming_another_entry_is_ignored(setup):
    models, corpus, cache = setup
    load_study(Grid.from_names(models, corpus, **SETTINGS), cache_dir=cache, extract=True)
    settings = ExtractionSettings(**SETTINGS)
    opened = open_corpus(corpus)
    gpt2, neox = (known_plan(resolve(ModelSpec(m)), opened, settings, cache) for m in models)
    assert gpt2 is not None and neox is not None and gpt2.key != neox.key
    # Forge gpt2's record to name neox's entry: the entry's weights fingerprint gives it away.
    record_path = fingerprints._record_path(
        cache, fingerprints.request(resolve(ModelSpec(models[0])), opened, settings)
    )
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "key": neox.key}))
    assert known_plan(resolve(ModelSpec(models[0])), opened, settings, cache) is None
    # The study then plans gpt2 the slow way, reads its own entry, and writes the record again.
    study = load_study(Grid.from_names(models, corpus, **SETTINGS), cache_dir=cache)
    assert known_plan(resolve(ModelSpec(models[0])), opened, settings, cache).key == gpt2.key
    assert len(study.runs) == 2
    record_path.write_text("{not json")
    assert known_plan(resolve(ModelSpec(models[0])), opened, settings, cache) is None


def test_changed_model_files_or_settings_find_no_record(setup):
    models, corpus, cache = setup
    load_study(Grid.from_names(models, corpus, **SETTINGS), cache_dir=cache, extract=True)
    opened = open_corpus(corpus)
    settings = ExtractionSettings(**SETTINGS)
    assert known_plan(resolve(ModelSpec(models[0])), opened, settings, cache) is not None
    assert (
        known_plan(resolve(ModelSpec(models[0])), opened, settings.with_changes(max_tokens=50), cache) is None
    )
    tokenizer = Path(models[0]) / "tokenizer_config.json"
    tokenizer.write_text(tokenizer.read_text().replace("}", ', "model_max_length": 31}', 1))
    assert (
        known_plan(resolve(ModelSpec(models[0])), opened, settings, cache) is None
    )  # tokenizer files changed


def test_only_a_cpu_only_request_is_recorded():
    assert cpu_only(ExtractionSettings(device="cpu"))
    assert not cpu_only(ExtractionSettings(device="cuda"))
    assert not cpu_only(ExtractionSettings(device="cpu", device_map="auto"))


def test_default_shard_size_is_the_planners():
    from rbplab.extraction.plan import SHARD_TOKENS

    assert fingerprints.DEFAULT_SHARD_TOKENS == SHARD_TOKENS


@pytest.fixture
def planned(tmp_path, gpt2_dir, tiny_tokenizer_dir, tiny_corpus):
    """gpt2 extracted once with its tokenizer given as an override (`tokenizer=`): a record."""
    model = str(shutil.copytree(gpt2_dir, tmp_path / "gpt2"))
    tokenizer = shutil.copytree(tiny_tokenizer_dir, tmp_path / "tokenizer")
    settings = ExtractionSettings(**SETTINGS)
    spec = ModelSpec(model, tokenizer=str(tokenizer))
    extract_run(spec, tiny_corpus, settings, cache_dir=tmp_path / "cache", progress=False)
    assert known_plan(resolve(spec), tiny_corpus, settings, tmp_path / "cache") is not None
    return spec, settings, tmp_path / "cache"


def test_a_record_is_not_reused_after_a_library_upgrade(planned, tiny_corpus, monkeypatch):
    spec, settings, cache = planned
    real = fingerprints.installed_versions

    def upgraded(packages):
        return {**real(packages), "transformers": "999.0"}

    monkeypatch.setattr(fingerprints, "installed_versions", upgraded)
    assert known_plan(resolve(spec), tiny_corpus, settings, cache) is None


def test_a_record_is_not_reused_with_another_tokenizer(planned, tiny_corpus, tmp_path):
    spec, settings, cache = planned
    other = shutil.copytree(spec.tokenizer, tmp_path / "other-tokenizer")
    config = other / "tokenizer_config.json"
    config.write_text(config.read_text().replace("}", ', "model_max_length": 31}', 1))
    assert known_plan(resolve(replace(spec, tokenizer=str(other))), tiny_corpus, settings, cache) is None
    assert known_plan(resolve(replace(spec, tokenizer=None)), tiny_corpus, settings, cache) is None


def test_only_the_runs_without_a_record_are_planned(setup, monkeypatch):
    """resolve_entries finds each run through its plan record where one holds and plans the others
    (each model described once): one lost record costs one model's planning, not the grid's."""
    from rbplab.extraction import plan as planning
    from rbplab.study.lookup import resolve_entries

    models, corpus, cache = setup
    grid = Grid.from_names(models, corpus, **SETTINGS)
    load_study(grid, cache_dir=cache, extract=True)
    opened, settings = open_corpus(corpus), ExtractionSettings(**SETTINGS)
    keys = [known_plan(resolve(ModelSpec(m)), opened, settings, cache).key for m in models]
    fingerprints._record_path(
        cache, fingerprints.request(resolve(ModelSpec(models[1])), opened, settings)
    ).unlink()
    planned, plan = [], planning.plan_extraction
    monkeypatch.setattr(
        planning, "plan_extraction", lambda ref, *a, **k: planned.append(ref.model) or plan(ref, *a, **k)
    )
    resolved = resolve_entries(grid, cache)
    assert planned == [grid.members[1].model]
    assert [r.plan is None for r in resolved] == [True, False]
    assert [r.entry.key for r in resolved] == keys and all(r.entry.is_complete() for r in resolved)
    assert known_plan(resolve(ModelSpec(models[1])), opened, settings, cache).key == keys[1]  # recorded again
