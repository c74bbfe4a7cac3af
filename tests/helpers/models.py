"""Tiny tokenizer and random causal LMs built locally (no hub), and the float64 reference ranks.

Everything is built from the text below: a byte-level BPE trained with `tokenizers` and
randomly initialised GPT-2 / GPT-NeoX / Llama configs a few thousand parameters in size, each by
`save_tiny`, the one builder of tiny models every test uses (OPT, Qwen2 and Gemma-2 too).
The models are deliberately awkward:
- GPT-2 (tied head): some embedding rows duplicated, so logits tie exactly;
- GPT-NeoX (untied head): output layer padded beyond the tokenizer's vocabulary,
  with the padded rows scaled up so they would dominate if they were ranked,
  plus duplicated head rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

TEXT = """
The quick brown fox jumps over the lazy dog. A rank is the number of tokens a model scores at
least as high as the true one. Scaling laws relate model size to loss; the relative-based law
relates model size to how often the right token is among the top k. Language models predict the
next token from the previous ones, one position at a time, over a vocabulary of tokens.
def add(a, b):
    return a + b  # small code snippets appear in corpora too
Wikipedia articles, legal texts and questions: four corpora, four families, many sizes.
"""

DOCUMENTS = [
    ("doc-a", "The quick brown fox jumps over the lazy dog again and again, " * 3),
    ("doc-b", "A rank counts tokens scored at least as high."),
    ("doc-c", "def add(a, b):\n    return a + b\n" * 4),
    ("doc-d", "x"),  # a single token: scorable only with a BOS
    ("doc-e", "Scaling laws relate model size to loss; models predict the next token. " * 2),
    ("doc-f", "Special strings such as <|endoftext|> inside text are plain text here."),
]

SPECIAL = "<|endoftext|>"


def build_tokenizer(path: Path, vocab_size: int = 360):
    """Byte-level BPE with one special token (bos = eos = pad = <|endoftext|>, GPT-2 style)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] + [text for _, text in DOCUMENTS], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL, eos_token=SPECIAL, pad_token=SPECIAL, unk_token=SPECIAL
    )
    fast.save_pretrained(path)
    return fast


def _duplicate_rows(weight: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
    with torch.no_grad():
        for src, dst in pairs:
            weight[dst] = weight[src]


def tie_pairs(tokenizer, corpus_texts: list[str], n: int = 6) -> list[tuple[int, int]]:
    """(src, dst) token pairs among frequent targets, so many scored tokens have exact ties."""
    counts: dict[int, int] = {}
    for text in corpus_texts:
        for i in tokenizer(text, add_special_tokens=False)["input_ids"]:
            counts[i] = counts.get(i, 0) + 1
    frequent = [i for i, _ in sorted(counts.items(), key=lambda kv: -kv[1])][: 2 * n]
    return list(zip(frequent[0::2], frequent[1::2], strict=False))


# The one shape of the tiny test models: 2 layers 32 wide, an MLP of 64, 4 heads, 64 positions.
SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}
# Per architecture: (config class, model class, its config of the shape above). GPT-2 and OPT name
# the same sizes their own way; each entry keeps the bytes every test was written against.
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {**SHAPE, "tie_word_embeddings": False}),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {**SHAPE, "num_key_value_heads": 2, "tie_word_embeddings": False},
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {**SHAPE, "num_key_value_heads": 2, "tie_word_embeddings": True},
    ),
    "opt": (
        "OPTConfig",
        "OPTForCausalLM",
        {
            "hidden_size": 32,
            "word_embed_proj_dim": 32,
            "ffn_dim": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
        },
    ),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**SHAPE, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16},
    ),
}


def save_tiny(
    path: Path,
    tokenizer,
    arch: str,
    *,
    seed: int,
    edit: Callable[[torch.nn.Module], None] | None = None,
    **config: Any,
) -> Path:
    """The one builder of tiny test models: a randomly initialised `arch` (a key of ARCHITECTURES)
    of the tiny shape, its weights drawn after `torch.manual_seed(seed)`, changed by `edit(model)`
    (under no_grad), saved at `path` with `tokenizer`. The vocabulary size and bos/eos ids are the
    tokenizer's; `config` adds to or overrides the architecture's config (a padded head, a softcap)."""
    import transformers

    config_class, model_class, shape = ARCHITECTURES[arch]
    torch.manual_seed(seed)
    settings = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        **shape,
        **config,
    }
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**settings)).eval()
    if edit is not None:
        with torch.no_grad():
            edit(model)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def edit_saved(path: Path, edit: Callable[[torch.nn.Module], None]) -> None:
    """Change the weights of the model saved at `path` with `edit(model)` (under no_grad) and save
    it there again (what a test does to make a model that fails a check)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        edit(model)
    model.save_pretrained(path)


def build_gpt2(path: Path, tokenizer, seed: int = 0) -> Path:
    def tie(model) -> None:
        _duplicate_rows(model.transformer.wte.weight, tie_pairs(tokenizer, [t for _, t in DOCUMENTS]))

    return save_tiny(path, tokenizer, "gpt2", seed=seed, edit=tie)


PAD_ROWS = 11


def build_neox(path: Path, tokenizer, seed: int = 1) -> Path:
    real = len(tokenizer)

    def tie_and_pad(model) -> None:
        head = model.get_output_embeddings().weight
        _duplicate_rows(head, tie_pairs(tokenizer, [t for _, t in DOCUMENTS]))
        head[real:] = head[:PAD_ROWS] * 20.0  # padded rows that would outrank real tokens

    return save_tiny(path, tokenizer, "gpt_neox", seed=seed, edit=tie_and_pad, vocab_size=real + PAD_ROWS)


def build_llama(path: Path, tokenizer, seed: int = 2) -> Path:
    return save_tiny(path, tokenizer, "llama", seed=seed)


def naive_reference(
    model_dir: Path, windows, vocab_size: int, pad_to=None, pad_id: int = 0
) -> dict[tuple[int, int], tuple[int, int, float]]:
    """Paper-style reference: plain model(input_ids).logits, full softmax (float64, so equal
    logits and only equal logits give equal probabilities) over the vocabulary, one Python step
    per token. `pad_to(length)` right-pads each window first (same shapes as the extractor, so
    hidden states match bit for bit). Returns {(doc_index, position): (n_greater, n_equal, nll)}."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out: dict[tuple[int, int], tuple[int, int, float]] = {}
    with torch.no_grad():
        for w in windows:
            ids = np.asarray(w.input_ids)
            if pad_to is not None:
                ids = np.concatenate([ids, np.full(pad_to(len(ids)) - len(ids), pad_id)])
            logits = model(torch.as_tensor(ids)[None]).logits[0]
            for j, pos in zip(w.target_rows(), w.positions(), strict=True):
                z = logits[j - 1, :vocab_size].double()
                t = int(w.input_ids[j])
                p = torch.softmax(z, dim=0)
                out[(w.doc_index, int(pos))] = (
                    int((p > p[t]).sum()),
                    int((p == p[t]).sum()),
                    float(-torch.log(p[t])),
                )
    return out


def _permute_qk(weight: np.ndarray, n_head: int, n_kv: int) -> np.ndarray:
    """llama.cpp's q/k row order (transformers' GGUF loader undoes it)."""
    heads = n_kv if n_kv != n_head else n_head
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_gguf(path: Path, model_dir: Path, tokenizer=None, placeholders: int = 0) -> Path:
    """A float32 llama GGUF of the model in `model_dir`, written with the `gguf` package; the
    tokenizer (GPT-2-style BPE) is embedded when given, as llama.cpp's converter does. With
    `placeholders`, the token list, embedding and output layer are padded by that many
    "[PAD<id>]" entries of type UNUSED (random rows, so they would change ranks if counted)."""
    import json

    import gguf
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = getattr(cfg, "rope_parameters", None) or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))))
    writer.add_vocab_size(cfg.vocab_size + placeholders)
    if tokenizer is not None:
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        tokens = [t for t, _ in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])]
        types = [3 if t == SPECIAL else 1 for t in tokens]
        tokens += [f"[PAD{len(tokens) + i}]" for i in range(placeholders)]
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types(types + [5] * placeholders)
        writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
        writer.add_bos_token_id(tokenizer.bos_token_id)
        writer.add_eos_token_id(tokenizer.eos_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        base, suffix = name.rsplit(".", 1)
        array = tensor.detach().float().numpy()
        if placeholders and base.endswith(("embed_tokens", "lm_head")):
            extra = np.random.default_rng(0).normal(0, 1, (placeholders, array.shape[1])).astype(np.float32)
            array = np.concatenate([array, extra])
        if base.endswith("q_proj"):
            array = _permute_qk(array, cfg.num_attention_heads, cfg.num_attention_heads)
        elif base.endswith("k_proj"):
            array = _permute_qk(array, cfg.num_attention_heads, cfg.num_key_value_heads)
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_checkpointed(
    path: Path, tokenizer, steps: tuple[int, int] = (10, 40), tokens_per_step: int = 64
) -> Path:
    """A tiny GPT-NeoX saved at two training steps in the micro-suite layout (scripts/train_micro.py):
    the intermediate in `<path>/checkpoints/step-<n>/` in bfloat16 without a tokenizer, the final model
    in `<path>` itself, and `checkpoints/schedule.json`. The two checkpoints have different weights."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from rbplab.catalog.registry import checkpoint_revision, write_local_schedule

    config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    early, final = steps
    torch.manual_seed(early)
    GPTNeoXForCausalLM(config).to(torch.bfloat16).save_pretrained(
        path / "checkpoints" / checkpoint_revision(early)
    )
    torch.manual_seed(final)
    GPTNeoXForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    write_local_schedule(path, steps, tokens_per_step)
    return path
