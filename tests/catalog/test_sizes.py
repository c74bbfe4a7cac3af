"""S = non-embedding parameters, from configs instantiated on the meta device."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPTNeoXConfig, OPTConfig, Qwen2Config

from rbplab.catalog.registry import meta_model, nonembedding_params, parameter_counts


def pythia_config(layers: int, hidden: int, heads: int, vocab: int = 50304) -> GPTNeoXConfig:
    return GPTNeoXConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        vocab_size=vocab,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        tie_word_embeddings=False,
    )


def test_gpt2_124m_definition_check():
    counts = parameter_counts(GPT2Config())  # the defaults are GPT-2 124M
    assert counts.n_nonembedding == 85_056_000
    assert counts.n_params == 124_439_808
    assert counts.tied
    # token table and learned positions are embedding; the tied head is not counted again
    assert set(counts.embedding_modules) == {"transformer.wte", "transformer.wpe"}
    assert counts.head_rows == 50257


def test_pythia_160m_definition_check():
    counts = parameter_counts(pythia_config(12, 768, 12))
    assert counts.n_nonembedding == 85_056_000
    assert not counts.tied
    assert counts.head_rows == 50304
    # untied head counted as embedding: both tables come off the total
    assert counts.n_embedding == 2 * 50304 * 768


@pytest.mark.parametrize(
    ("layers", "hidden", "heads", "published"),
    [(6, 128, 4, 1_189_888), (6, 512, 8, 18_915_328), (24, 1024, 16, 302_311_424)],
)
def test_pythia_matches_published_nonembedding_counts(layers, hidden, heads, published):
    # Values from the Pythia model table (pythia-14m, -70m, -410m).
    assert nonembedding_params(pythia_config(layers, hidden, heads)) == published


def test_opt_125m_learned_positions_are_embedding():
    config = OPTConfig(
        hidden_size=768,
        num_hidden_layers=12,
        ffn_dim=3072,
        num_attention_heads=12,
        word_embed_proj_dim=768,
        vocab_size=50272,
        max_position_embeddings=2048,
    )
    counts = parameter_counts(config)
    assert counts.n_params == 125_239_296  # the published size of facebook/opt-125m
    assert any("embed_positions" in name for name in counts.embedding_modules)
    # OPT offsets positions by 2, so its table has 2050 rows.
    assert counts.n_embedding == 50272 * 768 + 2050 * 768
    assert counts.n_nonembedding == 85_056_000  # same block shapes as GPT-2 124M
    assert counts.tied


def test_opt_350m_projections_count_as_nonembedding():
    config = OPTConfig(
        hidden_size=1024,
        num_hidden_layers=24,
        ffn_dim=4096,
        num_attention_heads=16,
        word_embed_proj_dim=512,
        do_layer_norm_before=False,
        vocab_size=50272,
    )
    counts = parameter_counts(config)
    model = meta_model(config)
    proj = model.model.decoder.project_in.weight.numel() + model.model.decoder.project_out.weight.numel()
    assert proj == 2 * 512 * 1024
    assert counts.n_embedding == 50272 * 512 + 2050 * 1024  # token table is 512 wide, positions 1024
    assert counts.n_nonembedding == counts.n_params - counts.n_embedding


def test_qwen2_tied_embedding_counted_once():
    small = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        tie_word_embeddings=True,
    )
    tied = parameter_counts(small)
    untied = parameter_counts(Qwen2Config(**{**small.to_dict(), "tie_word_embeddings": False}))
    assert tied.tied and not untied.tied
    assert tied.n_embedding == 1000 * 64
    assert untied.n_embedding == 2 * 1000 * 64
    assert tied.n_nonembedding == untied.n_nonembedding  # tying changes embedding, not S
    assert untied.n_params - tied.n_params == 1000 * 64


def test_qwen25_05b_matches_model_card():
    config = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    )
    counts = parameter_counts(config)
    # Model card: 0.49B parameters, 0.36B non-embedding.
    assert round(counts.n_params / 1e9, 2) == 0.49
    assert round(counts.n_nonembedding / 1e9, 2) == 0.36


def test_real_module_and_config_agree(tmp_path):
    config = GPTNeoXConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=97,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    from_module = parameter_counts(model)
    assert from_module == parameter_counts(config)
    # dict and saved config.json (file or its directory) give the same number
    config.save_pretrained(tmp_path)
    assert nonembedding_params(tmp_path) == from_module.n_nonembedding
    assert nonembedding_params(tmp_path / "config.json") == from_module.n_nonembedding
    assert (
        nonembedding_params(json.loads((tmp_path / "config.json").read_text())) == from_module.n_nonembedding
    )


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        nonembedding_params({"hidden_size": 8})
    with pytest.raises(FileNotFoundError, match="config.json"):
        nonembedding_params(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="transformers config"):
        nonembedding_params(42)
