"""Shared fixtures: the tiny tokenizer, tiny random causal LMs saved as HF directories, a small corpus.

The builders live in `helpers.models` (importable from any test); this file only makes them fixtures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers.models import DOCUMENTS, build_gpt2, build_llama, build_neox, build_tokenizer, write_gguf

from rbplab.catalog.corpora.corpus import Corpus, Document

pytest_plugins = ["helpers.hub_fixtures"]  # hub-reachability fixtures shared by two test folders

# The test models are tiny: a second thread buys nothing, and on a machine shared with
# other jobs OpenMP's barriers make every parallel op wait for a descheduled thread
# (measured: rank_stats 18x slower with 2 threads on an oversubscribed 2-core machine).
torch.set_num_threads(1)

# Without a GPU the fused head's Triton kernel runs through Triton's interpreter, which is chosen
# when the kernel is defined (rbplab.extraction.fused_head is imported): set before any test does.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(path)
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_gpt2(tmp_path_factory.mktemp("gpt2"), tiny_tokenizer)


@pytest.fixture(scope="session")
def neox_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_neox(tmp_path_factory.mktemp("neox"), tiny_tokenizer)


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_llama(tmp_path_factory.mktemp("llama"), tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_corpus() -> Corpus:
    return Corpus(
        name="tiny",
        documents=tuple(Document(i, t) for i, t in DOCUMENTS),
        source={"origin": "tests/conftest.py"},
    )


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory, llama_dir, tiny_tokenizer) -> dict[str, Path]:
    """{"with_tokenizer": file, "bare": file}: the tiny llama as GGUF, each in its own directory."""
    with_tok = tmp_path_factory.mktemp("gguf-tok") / "tiny-llama-f32.gguf"
    bare = tmp_path_factory.mktemp("gguf-bare") / "tiny-llama-f32.gguf"
    return {
        "with_tokenizer": write_gguf(with_tok, llama_dir, tiny_tokenizer),
        "bare": write_gguf(bare, llama_dir),
    }


@pytest.fixture(scope="session")
def hub_template(tmp_path_factory):
    """The hub stand-in (tests/helpers/hub.py), built once per session; use the `hub` fixture."""
    from helpers.hub import build_hub

    return build_hub(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture
def hub(hub_template, tmp_path, monkeypatch):
    """A private copy of the hub stand-in as the Hugging Face cache, offline (HF_HUB_OFFLINE=1):
    tests may move its branches or delete its files."""
    import shutil

    import datasets
    from helpers.hub import Hub
    from huggingface_hub import constants

    root = tmp_path / "hf-hub"
    shutil.copytree(hub_template.root, root)
    for name, value in (("HF_HUB_CACHE", str(root)), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    return Hub(root, {repo: dict(branches) for repo, branches in hub_template.commits.items()})
