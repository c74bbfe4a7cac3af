"""Committed evaluation corpora and micro-suite models: present, loadable, disjoint from training."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
import torch

DATA = Path(__file__).resolve().parents[2] / "data"
CORPORA = DATA / "corpora"
MODELS = DATA / "models"
EXPECTED_CORPORA = {"wikipedia", "humaneval", "legal-standin", "prose"}
META_KEYS = {
    "name",
    "description",
    "source_package",
    "package_file",
    "licence",
    "cleaning",
    "n_documents",
    "split",
}


def _norm_hash(text: str) -> str:
    # Same normalisation as scripts/build_corpora.py: case and whitespace insensitive.
    return hashlib.sha256(" ".join(text.lower().split()).encode("utf-8")).hexdigest()


def _read_corpus(name: str) -> list[dict]:
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _model_dirs() -> list[Path]:
    return sorted(p for p in MODELS.glob("micro-*") if p.is_dir())


@pytest.fixture(scope="module")
def training_docs() -> list[dict]:
    with gzip.open(MODELS / "micro.training-docs.json.gz", "rt") as f:
        return json.load(f)["documents"]


@pytest.mark.parametrize("name", sorted(EXPECTED_CORPORA))
def test_corpus_loads_with_meta(name: str) -> None:
    docs = _read_corpus(name)
    meta = json.loads((CORPORA / f"{name}.meta.json").read_text())
    assert META_KEYS <= meta.keys(), f"{name}.meta.json lacks {META_KEYS - meta.keys()}"
    assert meta["n_documents"] == len(docs) > 0
    ids = [d["id"] for d in docs]
    assert len(set(ids)) == len(ids), "document ids must be unique"
    assert all(isinstance(d["text"], str) and d["text"].strip() for d in docs)
    assert sum(len(d["text"]) for d in docs) == meta["n_characters"]


def test_stand_in_is_labelled() -> None:
    meta = json.loads((CORPORA / "legal-standin.meta.json").read_text())
    assert meta["stand_in"] is True and "stand-in" in meta["description"].lower()


def test_wikipedia_markup_is_cleaned() -> None:
    text = "\n".join(d["text"] for d in _read_corpus("wikipedia"))
    for marker in ("{{", "}}", "[[", "]]", "<ref", "'''"):
        assert text.count(marker) < 20, f"wiki markup {marker!r} left in the cleaned text"


def test_evaluation_disjoint_from_training(training_docs: list[dict]) -> None:
    train_ids = {d["id"] for d in training_docs}
    train_hashes = {d["norm_sha256"] for d in training_docs}
    for name in EXPECTED_CORPORA:
        for doc in _read_corpus(name):
            assert doc["id"] not in train_ids, f"{name}: {doc['id']} is also a training document"
            assert _norm_hash(doc["text"]) not in train_hashes, f"{name}: {doc['id']} text is in training"


def test_train_and_validation_disjoint(training_docs: list[dict]) -> None:
    by_split: dict[str, set[str]] = {}
    for d in training_docs:
        by_split.setdefault(d["split"], set()).add(d["norm_sha256"])
    assert by_split.keys() == {"train", "valid"}
    assert not by_split["train"] & by_split["valid"]


def test_micro_suite_files_and_summary() -> None:
    dirs = _model_dirs()
    assert len(dirs) >= 6, f"expected >= 6 micro models in {MODELS}, found {len(dirs)}"
    summary = {m["name"]: m for m in json.loads((MODELS / "micro.json").read_text())["models"]}
    sizes = []
    for d in dirs:
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"):
            assert (d / f).is_file(), f"{d.name} lacks {f}"
        assert d.name in summary, f"{d.name} missing from micro.json"
        card = (d / "README.md").read_text()
        assert f"{summary[d.name]['S']:,}" in card and "tokens seen" in card
        sizes.append(summary[d.name]["S"])
    assert sizes == sorted(sizes), "directory names must sort by size"
    assert max(sizes) / min(sizes) >= 100, "S must span at least two orders of magnitude"
    assert len({summary[d.name]["tokens"] for d in dirs}) == 1, "all members need the same token budget"
    total = sum(f.stat().st_size for d in dirs for f in d.glob("*.safetensors"))
    assert total < 50e6, f"micro-suite weights are {total / 1e6:.1f} MB; keep them under 50 MB"
    tokenizers = {(d / "tokenizer.json").read_bytes() for d in dirs}
    assert len(tokenizers) == 1, "all members must share one tokenizer"


def test_micro_models_load_and_run() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    summary = {m["name"]: m for m in json.loads((MODELS / "micro.json").read_text())["models"]}
    text = "def add(a, b):\n    return a + b\n\nThe President addressed the Congress."
    for d in _model_dirs():
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d)
        assert model.config.model_type == "gpt_neox" and not model.config.tie_word_embeddings
        ids = tok(text, return_tensors="pt")["input_ids"]
        assert tok.decode(ids[0]) == text, "byte-level BPE must round-trip"
        embeddings = {
            model.get_input_embeddings().weight.data_ptr(),
            model.get_output_embeddings().weight.data_ptr(),
        }
        s = sum(p.numel() for p in model.parameters() if p.data_ptr() not in embeddings)
        assert s == summary[d.name]["S"]
        with torch.no_grad():
            logits = model(input_ids=torch.cat([torch.tensor([[tok.bos_token_id]]), ids], dim=1)).logits
        assert logits.shape[-1] == len(tok) and torch.isfinite(logits).all()
