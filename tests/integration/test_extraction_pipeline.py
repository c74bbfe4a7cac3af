"""extract_run() / load_stats(): parity with a naive reference, batch invariance, cache behaviour, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.cache_rows import entry_rows
from helpers.extraction import extract_run
from helpers.models import naive_reference, save_tiny

from rbplab.catalog import registry
from rbplab.catalog.models import ModelLoadError, ModelSpec
from rbplab.extraction import pipeline as extract_module
from rbplab.extraction import plan as plan_module
from rbplab.extraction.plan import ContextLengthError, plan_extraction, plan_windows
from rbplab.extraction.reading import load_stats
from rbplab.extraction.scoring import default_batch_tokens, padded_length
from rbplab.store.cache.entry import CacheEntry

CTX = 16


def assert_matches_reference(model_dir, corpus, cache_dir, **settings):
    stats = load_stats(str(model_dir), corpus, cache_dir=cache_dir, progress=False, **settings)
    plan = plan_extraction(
        str(model_dir),
        corpus,
        **{
            k: v
            for k, v in settings.items()
            if k in ("context_length", "stride", "bos", "include_padded_vocab")
        },
    )
    windows = plan_windows(plan)
    context = plan.policy.context_length
    reference = naive_reference(
        model_dir, windows, plan.vocab_size, pad_to=lambda n: padded_length(n, context)
    )
    assert len(stats) == len(reference)
    ours = {
        (int(d), int(p)): (int(g), int(e), float(n))
        for d, p, g, e, n in zip(
            stats.doc, stats.position, stats.n_greater, stats.n_equal, stats.nll, strict=True
        )
    }
    assert ours.keys() == reference.keys()
    for key, (g, e, nll) in reference.items():
        assert ours[key][:2] == (g, e), key
        assert abs(ours[key][2] - nll) < 1e-5, key
    return stats


@pytest.mark.parametrize("arch", ["gpt2", "neox"])
def test_parity_with_naive_reference(arch, request, tiny_corpus, cache_dir):
    model_dir = request.getfixturevalue(f"{arch}_dir")
    stats = assert_matches_reference(model_dir, tiny_corpus, cache_dir, context_length=CTX)
    assert (stats.n_equal > 1).sum() >= 10  # duplicated embedding/head rows really produce ties
    assert stats.vocab_size == 360


def test_parity_strided_and_without_bos(gpt2_dir, tiny_corpus, cache_dir):
    assert_matches_reference(gpt2_dir, tiny_corpus, cache_dir, context_length=CTX, stride=5)
    stats = assert_matches_reference(gpt2_dir, tiny_corpus, cache_dir, context_length=CTX, bos="never")
    assert stats.position.min() == 1  # without a BOS the first token has no context


def test_padded_vocabulary(neox_dir, tiny_corpus, cache_dir):
    real = load_stats(str(neox_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    padded = assert_matches_reference(
        neox_dir, tiny_corpus, cache_dir, context_length=CTX, include_padded_vocab=True
    )
    assert real.vocab_size == 360 and padded.vocab_size == 360 + 11
    assert (padded.n_greater > real.n_greater).any()  # the scaled-up padded rows outrank real tokens
    assert int((real.n_greater + real.n_equal).max()) <= 360


def test_every_token_scored_once_with_bos(gpt2_dir, tiny_corpus, tiny_tokenizer, cache_dir):
    stats = load_stats(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    for index, doc in enumerate(tiny_corpus.documents):
        ids = tiny_tokenizer(doc.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        n_tokens = len(ids)
        assert stats.position[stats.doc == index].tolist() == list(range(n_tokens))


@pytest.mark.parametrize("stride", [None, 6])
def test_batch_invariance(gpt2_dir, tiny_corpus, tmp_path, stride):
    """Shards are byte-identical for any token budget: one window per batch, a few, all at once."""
    from helpers.studies import shard_bytes, summary_bytes

    caches = []
    for budget in (1, 150, 1 << 20):
        root = tmp_path / f"b{budget}"
        extract_run(
            str(gpt2_dir),
            tiny_corpus,
            context_length=48,
            stride=stride,
            batch_tokens=budget,
            shard_tokens=40,  # several shards, so the writer thread overlaps scoring
            cache_dir=root,
            progress=False,
        )
        caches.append(root)
    reference = shard_bytes(caches[0])
    assert len(reference) > 1
    for root in caches[1:]:
        assert shard_bytes(root) == reference
        assert summary_bytes(root) == summary_bytes(caches[0])


def test_token_budget_fills_batches():
    from rbplab.extraction.scoring import batches
    from rbplab.extraction.windows import Window

    def window(n: int) -> Window:
        return Window(0, np.arange(n, dtype=np.int64), 1, 0, np.ones(n - 1, dtype=bool))

    windows = [window(60)] * 10 + [window(100)] * 5 + [window(2048)] * 3
    sizes = [(length, len(group)) for length, group in batches(windows, 256, 2048)]
    # padded to 64 (4 per 256 tokens), 128 (2 per 256), 2048 (more than the budget: one at a time)
    assert sizes == [(64, 4), (64, 4), (64, 2), (128, 2), (128, 2), (128, 1)] + [(2048, 1)] * 3
    # left open, the budget follows the device: 8 windows of 2,048 on a GPU, one on a CPU
    assert default_batch_tokens("cuda:1") == 8 * 2048 and default_batch_tokens("cpu") == 2048


def count_forwards():
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *args: calls.append(1))
    return calls, handle


def test_cache_hit_runs_no_forward_pass(gpt2_dir, tiny_corpus, cache_dir, monkeypatch):
    first = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    assert not first.from_cache and first.n_tokens > 0

    def no_weights(*args, **kwargs):
        raise AssertionError("a cache hit must not load weights")

    monkeypatch.setattr(extract_module, "load_weights", no_weights)
    calls, handle = count_forwards()
    try:
        again = extract_run(
            str(gpt2_dir),
            tiny_corpus,
            context_length=CTX,
            batch_tokens=48,
            cache_dir=cache_dir,
            progress=False,
        )
        stats = load_stats(
            str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False
        )
    finally:
        handle.remove()
    assert calls == []
    assert again.from_cache and again.key == first.key and again.n_tokens == first.n_tokens == len(stats)


def test_key_covers_settings_and_manifest_records_them(gpt2_dir, tiny_corpus, cache_dir):
    base = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    keys = {base.key}
    for change in ({"context_length": 32}, {"bos": "never"}, {"stride": 4}, {"max_tokens": 20}):
        plan = plan_extraction(str(gpt2_dir), tiny_corpus, **{"context_length": CTX, **change})
        keys.add(CacheEntry(cache_dir, plan.key_spec).key)
    assert len(keys) == 5
    manifest = base.manifest
    assert manifest["model"]["vocab_size"] == 360 and manifest["model"]["fingerprint"].startswith("sha256:")
    assert manifest["settings"]["context_length"] == CTX
    assert manifest["settings"]["batch_tokens"] == 2048  # left open: the CPU's budget
    assert manifest["settings"]["bos_decision"]["use"] is True
    assert manifest["vocab_size"] == 360 and manifest["n_tokens"] == base.n_tokens
    provenance = manifest["provenance"]
    for field in ("torch", "transformers", "device", "date", "tokens_per_second"):
        assert provenance.get(field), field
    assert manifest["spec"]["model"]["name"] == Path(gpt2_dir).name


def test_max_tokens_budget(gpt2_dir, tiny_corpus, cache_dir):
    full = load_stats(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    cut = load_stats(
        str(gpt2_dir), tiny_corpus, context_length=CTX, max_tokens=50, cache_dir=cache_dir, progress=False
    )
    assert len(cut) == 50
    assert np.array_equal(cut.n_greater, full.n_greater[:50]) and np.array_equal(cut.doc, full.doc[:50])


def test_progress_bar_reports_tokens(gpt2_dir, tiny_corpus, cache_dir, capsys):
    extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=True)
    err = capsys.readouterr().err
    assert "tok/s" in err and "gpt2" in err


def _reference_frame(model_dir, corpus, root) -> pd.DataFrame:
    result = extract_run(str(model_dir), corpus, context_length=CTX, cache_dir=root, progress=False)
    return entry_rows(CacheEntry.open(result.key, root))


def test_resume_after_crash(gpt2_dir, tiny_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "SHARD_TOKENS", 40)
    expected = _reference_frame(gpt2_dir, tiny_corpus, tmp_path / "clean")
    written = []
    original = CacheEntry.write_shard

    def crash_after_first(self, index, frame, *args, **kwargs):
        original(self, index, frame, *args, **kwargs)
        written.append(index)
        if len(written) == 2:
            raise KeyboardInterrupt("simulated crash after shard 1")

    monkeypatch.setattr(CacheEntry, "write_shard", crash_after_first)
    root = tmp_path / "crashy"
    with pytest.raises(KeyboardInterrupt):
        extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    monkeypatch.setattr(CacheEntry, "write_shard", original)
    result = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    assert not result.from_cache and result.manifest["provenance"]["resumed_shards"] == 2
    assert len(result.manifest["shards"]) > 2
    pd.testing.assert_frame_equal(entry_rows(CacheEntry.open(result.key, root)), expected)


@pytest.mark.slow  # a fresh interpreter imports torch and transformers (~10 s)
def test_resume_after_sigkill(gpt2_dir, tiny_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "SHARD_TOKENS", 40)
    expected = _reference_frame(gpt2_dir, tiny_corpus, tmp_path / "clean")
    root = tmp_path / "killed"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from helpers.models import DOCUMENTS
        from rbplab.extraction import plan
        from rbplab.store.cache.entry import CacheEntry
        from rbplab.catalog.corpora import Corpus, Document
        plan.SHARD_TOKENS = 40
        original = CacheEntry.write_shard
        def write_then_die(self, index, frame, *args, **kwargs):
            original(self, index, frame, *args, **kwargs)
            if index == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        CacheEntry.write_shard = write_then_die
        docs = tuple(Document(i, t) for i, t in DOCUMENTS)
        corpus = Corpus("tiny", docs, {{"origin": "tests/conftest.py"}})
        from helpers.extraction import extract_run
        extract_run({str(gpt2_dir)!r}, corpus, context_length={CTX}, cache_dir={str(root)!r}, progress=False)
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    entries = [p for p in root.glob("??/*") if p.is_dir()]
    assert len(entries) == 1 and not (entries[0] / "manifest.json").exists()
    result = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    assert result.manifest["provenance"]["resumed_shards"] == 2
    pd.testing.assert_frame_equal(entry_rows(CacheEntry.open(result.key, root)), expected)


def test_corrupted_shard_is_recomputed_with_warning(gpt2_dir, tiny_corpus, cache_dir, monkeypatch):
    monkeypatch.setattr(plan_module, "SHARD_TOKENS", 40)
    expected = load_stats(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    result = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False)
    shard = result.path / result.manifest["shards"][1]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="shard 1"):
        again = load_stats(
            str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False
        )
    assert np.array_equal(again.n_greater, expected.n_greater) and np.array_equal(again.nll, expected.nll)
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["provenance"]["resumed_shards"] == len(manifest["shards"]) - 1


def test_bad_inputs(gpt2_dir, gguf_files, tiny_corpus, cache_dir):
    with pytest.raises(ContextLengthError, match="at most 64"):
        extract_run(str(gpt2_dir), tiny_corpus, context_length=65, cache_dir=cache_dir, progress=False)
    with pytest.raises(ModelLoadError, match="tokenizer="):
        extract_run(str(gguf_files["bare"]), tiny_corpus, cache_dir=cache_dir, progress=False)
    with pytest.raises(registry.UnknownModelError, match="Known families"):
        extract_run("no-such-model", tiny_corpus, cache_dir=cache_dir, progress=False)
    with pytest.raises(ValueError, match="batch_tokens"):
        extract_run(str(gpt2_dir), tiny_corpus, batch_tokens=0, cache_dir=cache_dir, progress=False)
    with pytest.raises(ValueError, match="max_tokens"):
        extract_run(str(gpt2_dir), tiny_corpus, max_tokens=-3, cache_dir=cache_dir, progress=False)
    with pytest.raises(ValueError, match="stride"):
        extract_run(
            str(gpt2_dir), tiny_corpus, context_length=CTX, stride=CTX, cache_dir=cache_dir, progress=False
        )
    assert not any(cache_dir.glob("??/*/manifest.json"))  # failed runs leave no complete-looking entry


def test_gguf_extraction_matches_original(gguf_files, llama_dir, tiny_corpus, cache_dir):
    from_gguf = load_stats(
        ModelSpec(str(gguf_files["bare"]), tokenizer=str(llama_dir)),
        tiny_corpus,
        context_length=CTX,
        cache_dir=cache_dir,
        progress=False,
    )
    original = load_stats(
        str(llama_dir), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False
    )
    assert np.array_equal(from_gguf.n_greater, original.n_greater)
    assert np.allclose(from_gguf.nll, original.nll, atol=1e-5)


def test_local_corpus_file(gpt2_dir, tmp_path, cache_dir):
    path = tmp_path / "notes.txt"
    path.write_text("A short local document about ranks and tokens.")
    result = extract_run(str(gpt2_dir), str(path), context_length=CTX, cache_dir=cache_dir, progress=False)
    assert result.n_tokens > 5 and result.manifest["corpus"]["name"] == "notes"


def test_bundled_corpus_with_budget(gpt2_dir, cache_dir):
    from rbplab.catalog.corpora import list_corpora

    table = list_corpora()
    bundled = table[table["origin"] == "bundled"]["name"].tolist()
    if not bundled:
        pytest.skip("no bundled corpora in data/corpora yet")
    name = bundled[0]
    result = extract_run(
        str(gpt2_dir), name, context_length=64, max_tokens=300, cache_dir=cache_dir, progress=False
    )
    assert result.n_tokens == 300


@pytest.fixture(scope="module")
def padded_gguf(tmp_path_factory, llama_dir, tiny_tokenizer):
    """The tiny llama as GGUF with its tokenizer and 24 trailing "[PAD<id>]" placeholder tokens."""
    from helpers.models import write_gguf

    return write_gguf(
        tmp_path_factory.mktemp("gguf-pad") / "tiny-llama-padded.gguf", llama_dir, tiny_tokenizer, 24
    )


def test_gguf_placeholder_tokens_are_left_out(padded_gguf, gguf_files, tiny_corpus, cache_dir):
    from rbplab.extraction.gguf import trailing_placeholders
    from rbplab.extraction.sources import describe_model

    assert (
        trailing_placeholders(padded_gguf) == 24 and trailing_placeholders(gguf_files["with_tokenizer"]) == 0
    )
    described = describe_model(str(padded_gguf))
    assert len(described.tokenizer) == 360 + 24  # the GGUF tokenizer counts the placeholders
    info = described.info
    assert (info.vocab_size, info.head_rows, info.placeholder_tokens) == (360, 384, 24)
    padded = load_stats(
        str(padded_gguf), tiny_corpus, context_length=CTX, cache_dir=cache_dir, progress=False
    )
    real = load_stats(
        str(gguf_files["with_tokenizer"]),
        tiny_corpus,
        context_length=CTX,
        cache_dir=cache_dir,
        progress=False,
    )
    assert padded.vocab_size == real.vocab_size == 360
    assert np.array_equal(padded.n_greater, real.n_greater) and np.array_equal(padded.n_equal, real.n_equal)
    assert np.allclose(padded.nll, real.nll, atol=1e-5)
    # The padded-vocabulary option still ranks over every output row, placeholders included.
    every_row = load_stats(
        str(padded_gguf),
        tiny_corpus,
        context_length=CTX,
        cache_dir=cache_dir,
        progress=False,
        include_padded_vocab=True,
    )
    assert every_row.vocab_size == 384 and not np.array_equal(every_row.n_greater, real.n_greater)


def _build_opt(path: Path, tokenizer) -> Path:
    return save_tiny(path, tokenizer, "opt", seed=3)


def _build_qwen2(path: Path, tokenizer) -> Path:
    return save_tiny(path, tokenizer, "qwen2", seed=4)


@pytest.mark.parametrize("arch", ["gpt2", "neox", "llama", "opt", "qwen2", "micro"])
def test_no_kv_cache_is_built(arch, request, tiny_corpus, tiny_tokenizer, tmp_path, monkeypatch):
    """Every forward rbplab runs (the load check and scoring) passes use_cache=False: no
    transformers Cache object is constructed, and no output carries past_key_values."""
    from transformers import cache_utils

    builders = {"opt": _build_opt, "qwen2": _build_qwen2}
    if arch in builders:
        model_dir = builders[arch](tmp_path / arch, tiny_tokenizer)
    elif arch == "micro":
        model_dir = Path(__file__).resolve().parents[2] / "data" / "models" / "micro-1-25K"
    else:
        model_dir = request.getfixturevalue(f"{arch}_dir")
    built, outputs = [], []
    original = cache_utils.Cache.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(cache_utils.Cache, "__init__", counting_init)
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: outputs.append(getattr(output, "past_key_values", None))
    )
    try:
        result = extract_run(
            str(model_dir), tiny_corpus, context_length=CTX, cache_dir=tmp_path / "c", progress=False
        )
    finally:
        handle.remove()
    assert result.n_tokens > 0 and outputs  # forwards ran
    assert built == [] and all(p is None for p in outputs), (built, arch)
