"""Model loading: local directories, GGUF files, metadata without weights, fingerprints, clear errors."""

from __future__ import annotations

import shutil

import pytest
import torch
from helpers.models import PAD_ROWS, build_tokenizer, save_tiny
from transformers import LlamaConfig

from rbplab.catalog import registry
from rbplab.catalog.models import ModelLoadError, ModelSpec
from rbplab.catalog.registry import nonembedding_params
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.sources import describe_model, resolve_dtype, select_device
from rbplab.extraction.weights import check_head, load_model
from rbplab.store.hub import HubUnreachableError


def test_describe_reads_metadata_without_weights(gpt2_dir, neox_dir, tiny_tokenizer, monkeypatch):
    import transformers

    def no_weights(*args, **kwargs):
        raise AssertionError("describe_model must not load weights")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    gpt2 = describe_model(str(gpt2_dir)).info
    assert gpt2.vocab_size == len(tiny_tokenizer) == gpt2.head_rows
    assert gpt2.n_nonembedding == nonembedding_params(gpt2_dir) > 0
    assert gpt2.n_params > gpt2.n_nonembedding
    assert gpt2.architecture == "GPT2LMHeadModel"
    assert gpt2.max_context == 64 and gpt2.dtype == "float32" and gpt2.device == "cpu"
    assert gpt2.fingerprint.startswith("sha256:") and gpt2.tokenizer_fingerprint.startswith("sha256:")
    assert gpt2.bos_token_id == tiny_tokenizer.bos_token_id
    neox = describe_model(str(neox_dir)).info
    assert neox.vocab_size == len(tiny_tokenizer) and neox.head_rows == len(tiny_tokenizer) + PAD_ROWS
    assert neox.to_dict()["head_rows"] == neox.head_rows


def test_load_model_checks_the_head(gpt2_dir):
    model, tokenizer, info = load_model(ModelSpec(str(gpt2_dir)))
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert len(tokenizer) == info.vocab_size
    assert check_head(model, info) < 1e-4


def test_the_head_check_converts_the_head_a_block_of_rows_at_a_time(gpt2_dir, monkeypatch):
    """Blocks of 7 rows (the vocabulary is not a multiple of 7) give the whole head's logits: the
    check's answer does not change, and no float32 block is wider than 7 rows (the bfloat16 model's
    own products are the other calls)."""
    from rbplab.extraction import weights

    model, _, info = load_model(str(gpt2_dir), ExtractionSettings(dtype="bfloat16"))
    whole = check_head(model, info)
    widths = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(weights, "CHECK_ROWS", 7)
    monkeypatch.setattr(
        torch.nn.functional,
        "linear",
        lambda x, w, b=None: (w.dtype == torch.float32 and widths.append(w.shape[0])) or linear(x, w, b),
    )
    assert check_head(model, info) == whole
    head_rows = model.get_output_embeddings().weight.shape[0]
    assert head_rows % 7 and max(widths) == 7 and sum(widths) == head_rows


def test_bfloat16_model(gpt2_dir):
    model, _, info = load_model(str(gpt2_dir), ExtractionSettings(dtype="bfloat16"))
    assert info.dtype == "bfloat16" and next(model.parameters()).dtype == torch.bfloat16


def test_softcapped_logits(tmp_path, tiny_tokenizer):
    save_tiny(tmp_path, tiny_tokenizer, "gemma2", seed=0, final_logit_softcapping=0.5)
    model, _, info = load_model(str(tmp_path))
    assert info.softcap == 0.5
    check_head(model, info)


def test_unsupported_logit_transform_is_refused(tmp_path, gpt2_dir):
    # A config promising a softcap that the model does not apply: head check must fail.
    import json

    shutil.copytree(gpt2_dir, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["final_logit_softcapping"] = 0.1
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="does not reproduce"):
        load_model(str(tmp_path / "m"))


def test_unknown_model_lists_families():
    with pytest.raises(registry.UnknownModelError, match="Known families: .*pythia"):
        describe_model("definitely-not-a-model")


def test_bad_local_paths(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json and no .gguf"):
        describe_model(str(tmp_path / "empty"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf file"):
        describe_model(str(tmp_path / "weights.bin"))


def test_tokenizer_larger_than_head(gpt2_dir, tmp_path):
    build_tokenizer(tmp_path / "big", vocab_size=420)
    with pytest.raises(ModelLoadError, match="does not belong"):
        describe_model(ModelSpec(str(gpt2_dir), tokenizer=str(tmp_path / "big")))


def test_gguf_without_tokenizer_needs_one(gguf_files, tiny_tokenizer_dir):
    with pytest.raises(ModelLoadError, match="tokenizer="):
        describe_model(str(gguf_files["bare"]))
    info = describe_model(ModelSpec(str(gguf_files["bare"]), tokenizer=str(tiny_tokenizer_dir))).info
    assert info.gguf_file == gguf_files["bare"].name and info.vocab_size == 360


def test_gguf_loads_like_the_original(gguf_files, llama_dir):
    from transformers import AutoModelForCausalLM

    path = gguf_files["with_tokenizer"]
    model, tokenizer, info = load_model(str(path))
    same = describe_model(ModelSpec(str(path.parent), gguf_file=path.name)).info
    assert same.fingerprint == info.fingerprint
    assert info.architecture == "LlamaForCausalLM" and len(tokenizer) == info.vocab_size
    original = AutoModelForCausalLM.from_pretrained(llama_dir).eval()
    ids = torch.tensor([[1, 5, 9, 33, 100, 200, 7]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, original(ids).logits, atol=1e-5)


def test_device_and_dtype_selection():
    assert select_device("auto").type in ("cuda", "mps", "cpu")
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(ModelLoadError, match="unknown device"):
        select_device("abacus")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            select_device("cuda")
    cpu, gpu = torch.device("cpu"), torch.device("cuda")

    class Config:
        dtype = torch.bfloat16

    assert resolve_dtype("auto", cpu, Config()) == "float32"
    assert resolve_dtype("auto", gpu, Config()) == "bfloat16"
    # a config.json that spells it torch_dtype (most checkpoints): transformers reads it as dtype
    assert resolve_dtype("auto", gpu, LlamaConfig.from_dict({"torch_dtype": "float16"})) == "float16"
    assert resolve_dtype("float16", cpu) == "float16"
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("float8", cpu)


def test_hub_id_and_revision_from_an_offline_hub_cache(gpt2_dir, tmp_path, monkeypatch):
    # The hub's cache layout, filled by hand: the real loading code path, no network.
    import huggingface_hub.constants as hub

    repo = tmp_path / "models--tiny-org--tiny-gpt2"
    for revision, commit in (("main", "a" * 40), ("step1", "b" * 40)):
        shutil.copytree(gpt2_dir, repo / "snapshots" / commit)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / revision).write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    assert describe_model("tiny-org/tiny-gpt2").info.fingerprint == "hub:" + "a" * 40
    model, _, info = load_model(ModelSpec("tiny-org/tiny-gpt2", revision="step1"))
    assert info.fingerprint == "hub:" + "b" * 40 and info.revision == "step1"
    assert info.source == "tiny-org/tiny-gpt2" and not model.training
    with pytest.raises(HubUnreachableError, match="does not hold tiny-org/not-in-the-cache@main"):
        describe_model("tiny-org/not-in-the-cache")  # an error, never a "hub-unpinned:" key
