"""Checks that a model's config is sane and describes its weight files, before anything is allocated.

A config.json is data from whoever made the folder. transformers turns a bad field into a
traceback (`vocab_size = "4096"`: a TypeError; `num_attention_heads = 0`: ZeroDivisionError),
an allocation failure (`num_hidden_layers = 10**7`: std::bad_alloc, after minutes of building
modules; `vocab_size = -5`: "negative dimension"), or, worst, nothing at all: a config that
asks for more layers than the files hold loads, initialises the missing ones at random and is
scored as if it were the model. So, in order:

1. `check_config_fields` reads the raw fields (config.json, or what a GGUF file's metadata
   converts to) before transformers builds anything from them: integers where sizes go, within
   [1, an upper bound no released model comes near], heads dividing the hidden size (unless the
   config sets head_dim) and key-value heads dividing the heads.
2. `check_weight_files` compares the parameters of the architecture the config builds (the meta
   device instance rbplab builds anyway for S) with the tensors the weight files declare
   (safetensors headers, a GGUF tensor table: shapes only, no data read, no code run). The files
   must hold every parameter: at least as many values as the model has parameters, and no more
   than those plus a tied head saved twice and the buffers old checkpoints saved (transformers'
   own `_keys_to_ignore_on_load_unexpected` names those).
`check_weights_match` applies 2. to a model's own files (their shapes as
`rbplab.extraction.weight_files` reads them). Each failure is one `ModelLoadError` line naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rbplab.catalog.models import ModelLoadError, ResolvedModel

# Size fields (the transformers name first, then the spellings other configs use) and an upper
# bound far above any released model (Llama 3.1 405B: 126 layers, hidden 16,384, 128 heads,
# intermediate 53,248; Gemma 3: 262,144 tokens; context windows up to 10M).
SIZE_FIELDS: dict[str, tuple[tuple[str, ...], int]] = {
    "vocab_size": (("vocab_size", "n_vocab", "padded_vocab_size"), 1 << 22),
    "hidden_size": (("hidden_size", "n_embd", "d_model", "model_dim"), 1 << 17),
    "num_hidden_layers": (("num_hidden_layers", "n_layer", "n_layers", "num_layers"), 1024),
    "num_attention_heads": (("num_attention_heads", "n_head", "n_heads", "num_heads"), 1 << 12),
    "num_key_value_heads": (("num_key_value_heads", "num_kv_heads", "n_head_kv"), 1 << 12),
    "intermediate_size": (("intermediate_size", "n_inner", "ffn_dim", "d_ff"), 1 << 20),
    "max_position_embeddings": (("max_position_embeddings", "n_positions", "n_ctx"), 1 << 26),
    "head_dim": (("head_dim",), 1 << 14),
}
# Float fields that must be finite and positive (softcap, rope base) or non-negative (epsilons).
POSITIVE_FLOATS = ("final_logit_softcapping", "rope_theta")
NON_NEGATIVE_FLOATS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
# buffers transformers itself drops from checkpoints of every model (modeling_utils)
ALWAYS_IGNORED = (r"rotary_emb\.inv_freq", r"(^|\.)position_ids$")


def _field_problem(name: str, value: Any, bound: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, not {type(value).__name__}"
    if value < 1:
        return "must be a positive integer"
    if value > bound:
        return f"is larger than any model rbplab can load (at most {bound:,})"
    return None


def check_config_fields(raw: Mapping[str, Any], where: str) -> None:
    """Refuse (ModelLoadError, one line naming the field) a raw config dict whose size fields are
    not integers in range, or whose heads do not divide; `text_config` is checked the same way.
    `where` names the config in the message ("config.json of '/models/x'")."""
    _check_fields(raw, where, "")
    text = raw.get("text_config")
    if isinstance(text, Mapping):
        _check_fields(text, where, "text_config.")


def _check_fields(raw: Mapping[str, Any], where: str, prefix: str) -> None:
    found: dict[str, tuple[str, int]] = {}
    for canonical, (names, bound) in SIZE_FIELDS.items():
        for name in names:
            value = raw.get(name)
            if value is None:  # absent or null: the architecture's default applies
                continue
            problem = _field_problem(name, value, bound)
            if problem is not None:
                _refuse(where, f"{prefix}{name}", value, problem)
            found.setdefault(canonical, (name, value))
    for name in POSITIVE_FLOATS + NON_NEGATIVE_FLOATS:
        value = raw.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (value == 0 and name in POSITIVE_FLOATS):
            sign = "positive" if name in POSITIVE_FLOATS else "non-negative"
            _refuse(where, f"{prefix}{name}", value, f"must be a finite {sign} number")
    heads, hidden = found.get("num_attention_heads"), found.get("hidden_size")
    if heads and hidden and "head_dim" not in found and hidden[1] % heads[1]:
        _refuse(
            where,
            f"{prefix}{heads[0]}",
            heads[1],
            f"does not divide {prefix}{hidden[0]} = {hidden[1]} (and no head_dim is set)",
        )
    kv = found.get("num_key_value_heads")
    if heads and kv and heads[1] % kv[1]:
        _refuse(where, f"{prefix}{kv[0]}", kv[1], f"does not divide {prefix}{heads[0]} = {heads[1]}")


def _refuse(where: str, field: str, value: Any, problem: str) -> None:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise ModelLoadError(
        f"{where}: {field} = {shown} {problem}; the config is damaged or was edited (compare it with the "
        "original model's)"
    )


# ---------------------------------------------------------------------------------------------
# Weight files


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def check_weight_files(
    meta: Any, config: Any, shapes: Mapping[str, tuple[int, ...]], where: str, layer_names: str = r"\.(\d+)\."
) -> None:
    """Refuse weights that do not hold the parameters of `meta` (the config's architecture on the
    meta device): ModelLoadError naming the config field that disagrees (the number of layers,
    the vocabulary or hidden size), or the two parameter counts when no single field explains it.
    `shapes` are the files' tensors by name; `layer_names` finds a layer index in a tensor name."""
    # transformers drops file tensors the model does not have when they match these patterns
    # (re.search: GPT-2's "attn.bias" also matches c_attn.bias, so only unexpected names count)
    patterns = [*ALWAYS_IGNORED, *(getattr(meta, "_keys_to_ignore_on_load_unexpected", None) or ())]
    ignored = re.compile("|".join(f"({p})" for p in patterns))
    prefix = f"{getattr(meta, 'base_model_prefix', '')}."
    known = {_unprefixed(name, prefix) for name in meta.state_dict()}
    held = sum(
        _numel(shape)
        for name, shape in shapes.items()
        if _unprefixed(name, prefix) in known or not ignored.search(name)
    )
    params = {id(p): p for p in meta.parameters()}
    wanted = sum(p.numel() for p in params.values())
    head = meta.get_output_embeddings() if hasattr(meta, "get_output_embeddings") else None
    embed = meta.get_input_embeddings() if hasattr(meta, "get_input_embeddings") else None
    tied = head is not None and embed is not None and head.weight is embed.weight
    slack = (head.weight.numel() if tied else 0) + sum(b.numel() for b in meta.buffers())
    if wanted <= held <= wanted + slack:
        return
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    json_name = getattr(text, "attribute_map", {}) or {}

    def field(canonical: str) -> str:
        return json_name.get(canonical, canonical)

    layers = getattr(text, "num_hidden_layers", None)
    found = {int(m.group(1)) for name in shapes if (m := re.search(layer_names, name))}
    if isinstance(layers, int) and found and len(found) != layers:
        raise ModelLoadError(
            f"{where}: {field('num_hidden_layers')} = {layers} but the weight files hold {len(found)} "
            "layers; the config does not belong to these weights (edited, or from another model)"
        )
    if embed is not None:
        rows, cols = embed.weight.shape
        suffix = _suffix(meta, embed)
        stored = next((shape for name, shape in shapes.items() if suffix and name.endswith(suffix)), None)
        if stored is not None and len(stored) == 2 and tuple(stored) != (rows, cols):
            canonical, value, have = (
                ("vocab_size", rows, stored[0]) if stored[0] != rows else ("hidden_size", cols, stored[1])
            )
            raise ModelLoadError(
                f"{where}: {field(canonical)} = {value} but the weight files' token embedding has "
                f"{have} {'rows' if canonical == 'vocab_size' else 'columns'}; the config does not belong to "
                "these weights (edited, or from another model)"
            )
    raise ModelLoadError(
        f"{where}: the config describes a model of {wanted:,} parameters but the weight files hold {held:,} "
        "values; the config does not belong to these weights (edited, or from another model)"
    )


def _unprefixed(name: str, prefix: str) -> str:
    return name[len(prefix) :] if prefix != "." and name.startswith(prefix) else name


def _suffix(model: Any, module: Any) -> str | None:
    """The name of `module`'s weight without the base-model prefix ("embed_tokens.weight"), so that
    it matches checkpoints saved with or without that prefix."""
    name = next((n for n, m in model.named_modules() if m is module), None)
    if name is None:
        return None
    return f"{name.split('.')[-1]}.weight"


def config_label(model: ResolvedModel) -> str:
    """How error messages name a model's config."""
    if model.gguf_file:
        return f"the config in {model.gguf_file}"
    return f"config.json of {model.location!r}"


def check_weights_match(model: ResolvedModel, config: Any, meta: Any, shapes: Mapping | None) -> None:
    """Refuse a local model whose weight files do not hold the parameters its config describes
    (`check_weight_files`); `shapes` are their tensors as `rbplab.extraction.weight_files`
    read them (None: not read: hub models, quantised and pickle checkpoints, which `load_weights`
    checks once loaded, since transformers would initialise a missing tensor at random)."""
    label = config_label(model)
    if shapes is not None:
        check_weight_files(meta, config, shapes, label)
