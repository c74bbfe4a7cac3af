"""Issue 10 with real (tiny) models: read-only caches, remote code, bad checkpoints, repair.

Each case asserts the one-line message, that nothing outside the entry changed and that no
wrong numbers came back."""

from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest
import torch
from helpers.cli import run
from helpers.extraction import extract_run
from helpers.hostile import hostile_file
from helpers.models import edit_saved
from helpers.untrusted import read_only, snapshot

from rbplab.catalog.models import ModelSpec
from rbplab.core.errors import RbplabError
from rbplab.extraction import plan as plan_module
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.reading import load_stats
from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import cache_key

CTX = 16


def extract_args(model, corpus_file, cache_dir):
    return ["extract", "-m", str(model), "-c", str(corpus_file), "--cache-dir", str(cache_dir)] + [
        "--context-length",
        str(CTX),
        "--no-progress",
    ]


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 4)
    return path


def test_read_only_cache_serves_hits(capsys, gpt2_dir, tiny_corpus, corpus_file, tmp_path):
    root = tmp_path / "cache"
    expected = load_stats(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    assert run(capsys, *extract_args(gpt2_dir, corpus_file, root))[0] == 0
    before = snapshot(root)
    with read_only(root):
        with pytest.raises(OSError, match="Read-only"):
            (root / "probe").write_text("x")  # the guard works
        again = load_stats(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
        status, out, err = run(capsys, *extract_args(gpt2_dir, corpus_file, root))
        assert status == 0 and "\tcached\t" in out, err
        status, out, err = run(capsys, "cache", "--cache-dir", str(root), "verify")
        assert status == 0 and err == ""
        # a miss on a read-only cache fails in one line, before any weights are loaded
        status, _, err = run(capsys, *extract_args(gpt2_dir, corpus_file, root)[:-3], "--context-length", "8")
        assert status == 1 and "cannot write to cache location" in err and err.count("\n") == 1
    assert np.array_equal(again.n_greater, expected.n_greater) and np.array_equal(again.nll, expected.nll)
    assert snapshot(root) == before


def test_remote_code_is_refused_without_prompt(capsys, gpt2_dir, corpus_file, tmp_path, monkeypatch):
    model = tmp_path / "custom"
    shutil.copytree(gpt2_dir, model)
    marker = tmp_path / "code-ran"
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("y\ny\n"))
    root = tmp_path / "cache"
    status, out, err = run(capsys, *extract_args(model, corpus_file, root))
    assert status == 1 and out == "" and err.count("\n") == 1 and "[y/N]" not in err
    assert "needs custom Python code from its directory (config.json has an auto_map)" in err
    assert "--trust-remote-code" in err
    assert not marker.exists() and list_entries(root).empty


def test_trust_remote_code_enters_the_key_only_when_set(gpt2_dir, tiny_corpus):
    plain = plan_extraction(str(gpt2_dir), tiny_corpus, context_length=CTX)
    trusted = plan_extraction(
        ModelSpec(str(gpt2_dir), trust_remote_code=True), tiny_corpus, context_length=CTX
    )
    assert "trust_remote_code" not in plain.key_spec["model"]
    assert trusted.key_spec["model"]["trust_remote_code"] is True
    assert cache_key(trusted.key_spec) != cache_key(plain.key_spec)


def _truncated_safetensors(model):
    path = model / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def _pickle_checkpoint(model):
    (model / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": torch.zeros(1), "payload": os.system}, model / "pytorch_model.bin")


def _nan_weights(model):
    edit_saved(model, lambda weights: weights.transformer.h[1].mlp.c_fc.weight.fill_(float("nan")))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncated_safetensors, "a safetensors file is broken or truncated"),
        (_pickle_checkpoint, "its pickle checkpoint is refused by torch.load(weights_only=True)"),
        (_nan_weights, "the model produced NaN logits (first non-finite output: layer 1 of 2)"),
    ],
)
def test_bad_checkpoint_is_one_line_with_no_litter(capsys, gpt2_dir, corpus_file, tmp_path, damage, message):
    model = tmp_path / "model"
    shutil.copytree(gpt2_dir, model)
    damage(model)
    root = tmp_path / "cache"
    status, out, err = run(capsys, *extract_args(model, corpus_file, root))
    # (transformers' own "Loading weights" bar may precede it on stderr)
    last = err.strip().splitlines()[-1]
    assert status == 1 and out == "" and err.count("rbplab: error") == 1 and "Traceback" not in err
    assert last.startswith("rbplab: error: ") and message in last, err
    assert list_entries(root).empty and not list(root.glob("??"))  # not even a spec.json


def test_damaged_entry_is_recomputed_never_read(gpt2_dir, corpus_file, tmp_path, capsys):
    """A manifest copied from another entry: load_stats warns and recomputes; verify reports it;
    repair recomputes it through extraction; nothing outside the entry changes."""
    root = tmp_path / "cache"  # a corpus file, so repair can re-resolve it
    clean = load_stats(str(gpt2_dir), str(corpus_file), context_length=CTX, cache_dir=root, progress=False)
    target = extract_run(str(gpt2_dir), str(corpus_file), context_length=CTX, cache_dir=root, progress=False)
    other = extract_run(str(gpt2_dir), str(corpus_file), context_length=32, cache_dir=root, progress=False)
    shutil.copy(other.path / "manifest.json", target.path / "manifest.json")
    outside = snapshot(tmp_path, exclude=target.path)
    status, out, _ = run(capsys, "cache", "--cache-dir", str(root), "verify")
    assert status == 1 and f"CORRUPT  {target.key[:12]}  the manifest's key" in out
    status, out, err = run(capsys, "cache", "--cache-dir", str(root), "repair", "--no-progress")
    assert status == 0 and f"repaired {target.key[:12]}" in out, err
    # the cache index is derived data that repair brings up to date, under its lock (docs/cache.md)
    derived = ("cache/index/", "cache/locks/index.lock")
    after = snapshot(tmp_path, exclude=target.path)
    assert {k: v for k, v in after.items() if not k.startswith(derived)} == {
        k: v for k, v in outside.items() if not k.startswith(derived)
    }
    again = CacheEntry.open(target.key, root).read_stats()
    assert np.array_equal(again.n_greater, clean.n_greater) and np.array_equal(again.nll, clean.nll)
    shutil.copy(other.path / "manifest.json", target.path / "manifest.json")
    with pytest.warns(UserWarning, match="is damaged: the manifest's key"):
        again = load_stats(
            str(gpt2_dir), str(corpus_file), context_length=CTX, cache_dir=root, progress=False
        )
    assert np.array_equal(again.n_greater, clean.n_greater) and np.array_equal(again.nll, clean.nll)


def test_repair_says_when_the_model_is_gone(gpt2_dir, corpus_file, tmp_path, capsys):
    model = tmp_path / "gone"
    shutil.copytree(gpt2_dir, model)
    root = tmp_path / "cache"
    result = extract_run(str(model), str(corpus_file), context_length=CTX, cache_dir=root, progress=False)
    manifest = json.loads((result.path / "manifest.json").read_text())
    (result.path / "manifest.json").write_text(json.dumps({**manifest, "vocab_size": 1}))
    shutil.rmtree(model)
    capsys.readouterr()
    status, out, err = run(capsys, "cache", "--cache-dir", str(root), "repair", result.key[:8])
    assert status == 1 and err.count("\n") == 1
    assert (
        f"cannot repair cache entry {result.key[:12]}: " in err
        and "model 'gone' cannot be re-resolved" in err
    )


def test_foreign_shard_on_resume_is_recomputed(gpt2_dir, tiny_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "SHARD_TOKENS", 40)
    clean = load_stats(
        str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=tmp_path / "c", progress=False
    )
    root = tmp_path / "cache"
    other = extract_run(str(gpt2_dir), tiny_corpus, context_length=32, cache_dir=root, progress=False)
    target = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    for name in ("manifest.json", "shard-00001.parquet", "shard-00001.parquet.sha256"):
        (target.path / name).unlink()  # an interrupted run ...
    for name in ("shard-00001.parquet", "shard-00001.parquet.sha256"):
        shutil.copy(other.path / name, target.path / name)  # ... given another entry's shard
    with pytest.warns(UserWarning, match="shard 1 belongs to another entry"):
        result = extract_run(str(gpt2_dir), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    stats = CacheEntry.open(result.key, root).read_stats()
    assert np.array_equal(stats.n_greater, clean.n_greater) and np.array_equal(stats.nll, clean.nll)


# ---------------------------------------------------------------------------------------------
# Issue 31 item 4: an auto_map anywhere the config or tokenizer loader can reach


@pytest.fixture
def checkpointed_model(tmp_path, tiny_tokenizer):
    from helpers.models import build_checkpointed

    return build_checkpointed(tmp_path / "micro-t", tiny_tokenizer)


def _add_auto_map(folder, name: str, marker) -> None:
    data = json.loads((folder / name).read_text()) if (folder / name).exists() else {}
    data["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (folder / name).write_text(json.dumps(data))
    (folder / "tokenization_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("base", "tokenizer_config.json"),  # the checkpoint loads its tokenizer from its base folder
        ("base", "config.json"),
        ("checkpoints", "config.json"),  # a folder between the checkpoint and its base
        ("checkpoint", "config.json"),
    ],
)
def test_an_auto_map_reachable_from_a_checkpoint_needs_trust(
    capsys, checkpointed_model, corpus_file, tmp_path, where, name
):
    """A checkpoint revision whose base folder's tokenizer_config.json carries an auto_map was
    accepted without --trust-remote-code."""
    from rbplab.extraction.sources import RemoteCodeError, describe_model

    folder = {
        "base": checkpointed_model,
        "checkpoints": checkpointed_model / "checkpoints",
        "checkpoint": checkpointed_model / "checkpoints" / "step-10",
    }[where]
    marker = tmp_path / "code-ran"
    _add_auto_map(folder, name, marker)
    with pytest.raises(RemoteCodeError, match=rf"\({name} has an auto_map\).*--trust-remote-code"):
        describe_model(ModelSpec(str(checkpointed_model), revision="step-10"))
    root = tmp_path / "cache"
    capsys.readouterr()  # what building the model printed
    status, out, err = run(
        capsys, *extract_args(checkpointed_model, corpus_file, root), "--revision", "step-10"
    )
    assert status == 1 and out == "" and err.count("\n") == 1 and "--trust-remote-code" in err, err
    assert not marker.exists() and list_entries(root).empty


def test_a_checkpoint_without_an_auto_map_loads_as_before(checkpointed_model, tiny_corpus, tmp_path):
    result = extract_run(
        ModelSpec(str(checkpointed_model), revision="step-10"),
        tiny_corpus,
        context_length=CTX,
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    assert result.n_tokens > 0


def test_a_config_file_that_is_a_device_is_refused_when_checked_for_code(gpt2_dir, tmp_path):
    from rbplab.catalog.models import ModelLoadError
    from rbplab.extraction.sources import describe_model

    model = tmp_path / "model"
    shutil.copytree(gpt2_dir, model)
    hostile_file(model / "tokenizer_config.json", "/dev/zero")
    with pytest.raises(
        ModelLoadError, match="cannot check .*tokenizer_config.json.* for custom code: .*character device"
    ):
        describe_model(str(model))


def _poisoned_embedding(model, token: int, value: float) -> None:
    """One input-embedding row of an untied model set to `value` (the head stays finite)."""

    def poison(weights) -> None:
        weights.get_input_embeddings().weight[token] = value

    edit_saved(model, poison)


def _frequent_token_outside_load_check(tokenizer, ids: list[int]) -> int:
    """The most frequent token of `ids` that the load check's 16 inputs never use."""
    checked = {(i * 7919) % len(tokenizer) for i in range(16)}  # models.check_head's inputs
    counts = {t: ids.count(t) for t in set(ids) - checked}
    return max(sorted(counts), key=counts.get)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_embedding_row_is_one_line_naming_the_position_with_no_litter(
    capsys, llama_dir, tiny_tokenizer, tmp_path, value
):
    corpus_file = tmp_path / "c.txt"
    corpus_file.write_text(
        "The quick brown fox jumps over the lazy dog. " * 3 + "def add(a, b):\n    return a + b\n" * 3
    )
    ids = tiny_tokenizer(corpus_file.read_text(), add_special_tokens=False)["input_ids"]
    token = _frequent_token_outside_load_check(tiny_tokenizer, ids[ids.index(ids[-1]) :])  # of the code
    model = tmp_path / "model"
    shutil.copytree(llama_dir, model)
    _poisoned_embedding(model, token, value)
    root = tmp_path / "cache"
    status, out, err = run(capsys, *extract_args(model, corpus_file, root))
    last = err.strip().splitlines()[-1]
    # Document 0 is BOS + the text, cut into windows of CTX inputs advancing CTX - 1: window k
    # holds sequence items [k (CTX-1), k (CTX-1) + CTX) and scores document positions from
    # k (CTX-1). Attention multiplies the poisoned value vector by zero weights too (0 x NaN is
    # NaN), so every row of the first window holding the token is affected, its first one first.
    sequence = [tiny_tokenizer.bos_token_id, *ids]
    step = CTX - 1
    window = next(k for k in range(len(sequence)) if token in sequence[k * step : k * step + CTX])
    position = window * step
    assert position > 0
    assert status == 1 and out == "" and err.count("rbplab: error") == 1 and "Traceback" not in err
    assert last.startswith(f"rbplab: error: shard 0, document 0, token {position}: "), err
    assert f"of the {len(tiny_tokenizer)} logits are not finite (NaN or inf)" in last
    assert "hold NaN or inf" in last  # float32: the weights, not overflow
    assert list_entries(root).empty and not list(root.glob("??"))  # not even a spec.json


def test_non_finite_logits_after_finished_shards_keep_them(
    llama_dir, tiny_tokenizer, tiny_corpus, tmp_path, monkeypatch
):
    """A shard finished before the failure stays on disk (the run is resumable); no manifest."""
    monkeypatch.setattr(plan_module, "SHARD_TOKENS", 40)
    texts = [doc.text for doc in tiny_corpus.documents]
    first = set(tiny_tokenizer(texts[0], add_special_tokens=False)["input_ids"])
    later = [t for text in texts[1:] for t in tiny_tokenizer(text, add_special_tokens=False)["input_ids"]]
    token = _frequent_token_outside_load_check(tiny_tokenizer, [t for t in later if t not in first])
    model = tmp_path / "model"
    shutil.copytree(llama_dir, model)
    _poisoned_embedding(model, token, float("nan"))
    root = tmp_path / "cache"
    with pytest.raises(RbplabError, match=r"^shard [1-9]\d*, document [1-9]\d*, token \d+: "):
        extract_run(str(model), tiny_corpus, context_length=CTX, cache_dir=root, progress=False)
    (entry,) = [p for p in root.glob("??/*") if p.is_dir()]
    names = sorted(p.name for p in entry.iterdir())
    assert "shard-00000.parquet" in names and "spec.json" in names and "manifest.json" not in names


# (model fixture, field, value, what the one-line error must say). Sizes of the micro models
# (tests/helpers/models.py): llama 2 layers, hidden 32, 4 heads, 2 kv heads, intermediate 64;
# gpt2 2 layers, n_embd 32, 2 heads. Each value reaches transformers as it is (no other field
# changes), so the error must name this field.
HOSTILE_CONFIGS = [
    ("llama_dir", "num_hidden_layers", 10**7, "num_hidden_layers = 10000000 is larger than any model"),
    ("llama_dir", "vocab_size", -5, "vocab_size = -5 must be a positive integer"),
    ("llama_dir", "num_attention_heads", 0, "num_attention_heads = 0 must be a positive integer"),
    ("llama_dir", "vocab_size", "4096", "vocab_size = '4096' must be an integer, not str"),
    ("llama_dir", "hidden_size", 32.0, "hidden_size = 32.0 must be an integer, not float"),
    (
        "llama_dir",
        "num_key_value_heads",
        3,
        "num_key_value_heads = 3 does not divide num_attention_heads = 4",
    ),
    ("llama_dir", "rms_norm_eps", float("nan"), "rms_norm_eps = nan must be a finite non-negative number"),
    ("gpt2_dir", "n_head", 5, "n_head = 5 does not divide n_embd = 32"),
    # fields that fit their type and range but not the weight files
    ("llama_dir", "num_hidden_layers", 3, "num_hidden_layers = 3 but the weight files hold 2 layers"),
    ("llama_dir", "num_hidden_layers", 1, "num_hidden_layers = 1 but the weight files hold 2 layers"),
    ("gpt2_dir", "n_embd", 48, "n_embd = 48 but the weight files' token embedding has 32 columns"),
    ("llama_dir", "vocab_size", 400, "vocab_size = 400 but the weight files' token embedding has"),
]


@pytest.mark.parametrize(("fixture", "field", "value", "message"), HOSTILE_CONFIGS)
def test_hostile_config_field_is_one_line_naming_it_with_no_litter(
    request, capsys, corpus_file, tmp_path, fixture, field, value, message
):
    model = tmp_path / "model"
    shutil.copytree(request.getfixturevalue(fixture), model)
    config = json.loads((model / "config.json").read_text())
    assert field in config  # the micro model spells the field this way
    config[field] = value
    (model / "config.json").write_text(json.dumps(config))
    root = tmp_path / "cache"
    capsys.readouterr()  # the fixtures' own output
    status, out, err = run(capsys, *extract_args(model, corpus_file, root))
    assert status == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("rbplab: error: config.json of ") and message in err, err
    assert list_entries(root).empty and not list(root.glob("??"))


def test_config_asking_for_a_larger_layer_is_refused_with_both_counts(
    capsys, llama_dir, corpus_file, tmp_path
):
    """intermediate_size 64 -> 128: same layers and embedding, so the counts themselves are named.
    The model would have 2 layers x 3 MLP matrices x 32 x 64 more values than the file holds."""
    from safetensors import safe_open

    model = tmp_path / "model"
    shutil.copytree(llama_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["intermediate_size"] = 128
    (model / "config.json").write_text(json.dumps(config))
    with safe_open(model / "model.safetensors", "pt") as handle:
        held = sum(int(np.prod(handle.get_slice(name).get_shape())) for name in handle.keys())
    wanted = held + 2 * 3 * 32 * 64
    capsys.readouterr()
    status, out, err = run(capsys, *extract_args(model, corpus_file, tmp_path / "cache"))
    assert status == 1 and err.count("\n") == 1, err
    assert f"describes a model of {wanted:,} parameters but the weight files hold {held:,} values" in err


def test_config_over_a_pickle_checkpoint_is_checked_after_loading(capsys, llama_dir, corpus_file, tmp_path):
    """Pickle weights have no header to read first: the layers the file lacks (which transformers
    would initialise at random) are refused once it is loaded, before anything is scored."""
    from transformers import AutoModelForCausalLM

    model = tmp_path / "model"
    shutil.copytree(llama_dir, model)
    (model / "model.safetensors").unlink()
    weights = AutoModelForCausalLM.from_pretrained(llama_dir)
    torch.save(weights.state_dict(), model / "pytorch_model.bin")
    config = json.loads((model / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (model / "config.json").write_text(json.dumps(config))
    root = tmp_path / "cache"
    capsys.readouterr()
    status, out, err = run(capsys, *extract_args(model, corpus_file, root))
    last = err.strip().splitlines()[-1]
    assert status == 1 and out == "" and err.count("rbplab: error") == 1 and "Traceback" not in err
    assert "lack 9 tensor(s) its config's architecture has (model.layers.2." in last, err
    assert list_entries(root).empty and not list(root.glob("??"))
