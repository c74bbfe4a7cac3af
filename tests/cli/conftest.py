"""A data folder of the command line's tests: a one-model `micro` family and bundled corpora
small enough that extracting them takes a second."""

from __future__ import annotations

import gzip
import json
import shutil

import pandas as pd
import pytest

from rbplab.catalog.registry import registry_path

BUNDLED = ("humaneval", "prose")  # names of the real bundled corpora, so commands read as usual


def _jsonl(documents: list[dict]) -> str:
    return "".join(json.dumps(d) + "\n" for d in documents)


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory, gpt2_dir):
    """A data/ folder whose registry has a one-model `micro` family (conftest's tiny GPT-2,
    64 positions), bundled corpora `humaneval` and `prose` of three short documents each, and a
    small corpus file beside it (toy.jsonl)."""
    data = tmp_path_factory.mktemp("repo") / "data"
    shutil.copytree(gpt2_dir, data / "models" / "micro-t")
    families = pd.read_csv(registry_path())
    row = {
        **families.iloc[0].to_dict(),
        "family": "micro",
        "model": "micro-t",
        "source": "data/models/micro-t",
        "max_context": 64,
    }
    pd.DataFrame([row]).to_csv(data / "families.csv", index=False)
    (data / "corpora").mkdir()
    for name in BUNDLED:
        docs = [{"id": f"{name}-{i}", "text": f"{name} text number {i} " * (i + 2)} for i in range(3)]
        with gzip.open(data / "corpora" / f"{name}.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.write(_jsonl(docs))
    docs = [
        {"id": f"d{i}", "text": "the quick brown fox jumps over the lazy dog " * (i + 2)} for i in range(4)
    ]
    (data.parent / "toy.jsonl").write_text(_jsonl(docs))
    return data


@pytest.fixture
def repo(tiny_repo, monkeypatch):
    monkeypatch.setenv("RBPLAB_DATA", str(tiny_repo))
    return tiny_repo
