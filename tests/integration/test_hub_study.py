"""The hub paths end to end against the hub stand-in (offline): `rbplab extract --family pythia
--revision step1000`, and a study over hub corpora that reads each corpus once and, once cached,
runs with no dataset at all."""

from __future__ import annotations

import shutil

import datasets
import pytest
from helpers.hub import PYTHIA, repo_dir

from rbplab import cli
from rbplab.catalog.corpora import open_corpus
from rbplab.catalog.models import ModelSpec
from rbplab.catalog.registry import registry_path
from rbplab.extraction.plan import plan_extraction
from rbplab.grid import Grid
from rbplab.store.cache.layout import cache_key
from rbplab.study import load_study

HUB_MODELS = ("EleutherAI/pythia-14m", "facebook/opt-125m", "Qwen/Qwen2.5-0.5B")
DATASETS = ("wikimedia/wikipedia", "hotpotqa/hotpot_qa")


@pytest.fixture
def hub_registry(tmp_path, monkeypatch):
    """The real registry rows of the stand-in's models only (pythia-14m, opt-125m, qwen2.5-0.5b)."""
    lines = registry_path().read_text().splitlines()
    data = tmp_path / "data"
    data.mkdir()
    (data / "families.csv").write_text(
        "\n".join([lines[0], *(line for line in lines[1:] if line.split(",")[2] in HUB_MODELS)]) + "\n"
    )
    monkeypatch.setenv("RBPLAB_DATA", str(data))


@pytest.fixture
def reads(monkeypatch):
    """Counts every dataset read (datasets.load_dataset calls) by its data files' repo."""
    real = datasets.load_dataset
    calls: list[str] = []

    def counting(path, *args, **kwargs):
        files = kwargs.get("data_files") or [path]
        calls.append(next((r for r in DATASETS if r.replace("/", "--") in str(files[0])), str(path)))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", counting)
    return calls


def test_cli_extract_family_at_a_revision_keys_on_its_commit(hub, hub_registry, tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = ["extract", "--family", "pythia", "--revision", "step1000", "--corpus", "hub:humaneval"]
    assert cli.main([*argv, "--cache-dir", str(cache), "--no-progress"]) == 0
    label, corpus, _, state, short_key, path = capsys.readouterr().out.strip().split("\t")
    assert (label, corpus, state) == ("pythia-14m@step1000", "hub:humaneval", "extracted")
    commit = hub.commit(PYTHIA, "step1000")
    humaneval = open_corpus("hub:humaneval")
    spec = plan_extraction(ModelSpec(PYTHIA, revision="step1000"), humaneval).key_spec
    assert spec["model"]["fingerprint"] == f"hub:{commit}"
    assert spec["corpus"]["revision"] == hub.commit("openai/openai_humaneval")
    assert cache_key(spec).startswith(short_key)
    main_spec = plan_extraction(PYTHIA, humaneval).key_spec
    assert cache_key(main_spec) != cache_key(spec)
    # Again: a hit, keyed on the same commit.
    assert cli.main([*argv, "--cache-dir", str(cache), "--no-progress"]) == 0
    assert capsys.readouterr().out.split("\t")[3] == "cached"


def test_study_reads_each_hub_corpus_once_and_runs_offline_once_cached(hub, hub_registry, tmp_path, reads):
    cache = tmp_path / "cache"
    corpora = [
        f"hub:{name}@{hub.commit(repo)}"
        for name, repo in zip(("wikipedia", "hotpotqa"), DATASETS, strict=True)
    ]
    families = ["pythia", "opt", "qwen2.5"]
    study = load_study(Grid.from_names(families, corpora), cache_dir=cache, extract=True)
    assert len(study.runs) == 6 and study.corpora == ["hub:wikipedia", "hub:hotpotqa"]
    assert sorted(reads) == sorted(DATASETS)  # 3 models x 2 corpora, each corpus read once

    # Fully cached: no dataset files at all, no network, and nothing reads a dataset.
    for repo in DATASETS:
        shutil.rmtree(repo_dir(hub.root, repo, "datasets"))
    reads.clear()
    again = load_study(Grid.from_names(families, corpora), cache_dir=cache)
    assert reads == []
    for before, after in zip(study.runs, again.runs, strict=True):
        assert (before.model, before.corpus) == (after.model, after.corpus)
        assert (before.token_stats().n_greater == after.token_stats().n_greater).all()


def test_study_on_the_default_revision_reads_nothing_once_cached(hub, hub_registry, tmp_path, reads):
    """With the corpus at its default revision (a branch until the constants name commits), the
    branch is resolved from the local refs/; a cached study still reads no dataset file."""
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning, match="not pinned"):
        load_study(Grid.from_names(["pythia"], ["hub:hotpotqa"]), cache_dir=cache, extract=True)
    assert reads == ["hotpotqa/hotpot_qa"]
    repo = repo_dir(hub.root, "hotpotqa/hotpot_qa", "datasets")
    shutil.rmtree(repo / "snapshots" / hub.commit("hotpotqa/hotpot_qa") / "distractor")
    reads.clear()
    study = load_study(Grid.from_names(["pythia"], ["hub:hotpotqa"]), cache_dir=cache)
    assert reads == [] and study.corpora == ["hub:hotpotqa"]
