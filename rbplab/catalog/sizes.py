"""Model size S: the number of non-embedding parameters, computed without weights.

The paper (following Kaplan et al.) fits RBP against S = all parameters except
embeddings. "Embedding" here means every lookup table (token embeddings, learned
position embeddings, token-type tables: any `nn.Embedding`) plus the output head
when it is a separate matrix. A tied head shares the token-embedding matrix, so it
is counted once, as embedding. Dense projections around the embeddings (OPT-350m's
`project_in`/`project_out`) are ordinary matrix multiplies and count towards S.

`max_context` and `logit_softcap` are the two other facts of the architecture a plan reads from
its config. Sizes come from instantiating the architecture on PyTorch's meta device: shapes and
weight tying are real, no memory is allocated and nothing is downloaded, so the
numbers stay in step with transformers' own module definitions instead of a
hand-maintained formula per architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rbplab.core.documents import read_json
from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, MissingFileError

if TYPE_CHECKING:
    import torch


MAX_CONFIG_FILE_BYTES = 64 << 20  # a config.json is a few KB; the bound keeps /dev/zero out


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one architecture; tied tensors are counted once."""

    architecture: str
    n_params: int  # every distinct parameter tensor
    n_embedding: int  # lookup tables + untied output head
    n_nonembedding: int  # S
    tied: bool  # output head shares the token-embedding matrix
    head_rows: int | None  # rows of the output layer (may exceed the tokenizer's vocabulary)
    embedding_modules: tuple[str, ...]  # names of the modules counted as embedding


def _as_config(config: Any):
    """Accept a transformers config, a dict (with "model_type"), or a path to a config.json / model dir."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config
    if isinstance(config, dict):
        fields = dict(config)
        model_type = fields.pop("model_type", None)
        if model_type is None:
            raise InvalidArgumentError(
                "a config dict needs a 'model_type' key (e.g. 'gpt2', 'gpt_neox', 'opt', 'qwen2')"
            )
        try:
            return AutoConfig.for_model(model_type, **fields)
        except (ValueError, TypeError) as err:  # an unknown model_type, a field of the wrong type
            reason = " ".join(str(err).split())
            raise InvalidArgumentError(f"not a config transformers can build: {reason[:300]}") from None
    if isinstance(config, (str, Path)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise MissingFileError(
                f"no config.json at {path}; pass a transformers config, a dict or a local model directory"
            )
        return _as_config(read_json(path, "model config", MAX_CONFIG_FILE_BYTES, shape=dict))
    raise InvalidTypeError(
        f"expected a transformers config, dict, path or torch module, got {type(config).__name__}"
    )


def meta_model(config: Any) -> torch.nn.Module:
    """The causal-LM architecture of `config`, instantiated on the meta device (no memory, no download)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _as_config(config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def parameter_counts(config_or_model: Any) -> ParamCounts:
    """Count parameters of a config (instantiated on the meta device) or of an already-built module."""
    import torch  # imported here: reading the registry or the cache needs no torch

    model = config_or_model if isinstance(config_or_model, torch.nn.Module) else meta_model(config_or_model)

    # Distinct tensors only: model.parameters() already skips tied duplicates, but we key
    # by identity explicitly because embedding modules are visited separately below.
    params = {id(p): p.numel() for p in model.parameters()}
    n_params = sum(params.values())

    embedding_ids: set[int] = set()
    names: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding):
            embedding_ids.update(id(p) for p in module.parameters(recurse=False))
            names.append(name)

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    input_weight = getattr(inputs, "weight", None)
    tied = head_weight is not None and input_weight is not None and head_weight is input_weight
    if head is not None and not tied:
        embedding_ids.update(id(p) for p in head.parameters(recurse=False))
        names.append(next((n for n, m in model.named_modules() if m is head), "output_head"))

    n_embedding = sum(params[i] for i in embedding_ids if i in params)
    return ParamCounts(
        architecture=type(model).__name__,
        n_params=n_params,
        n_embedding=n_embedding,
        n_nonembedding=n_params - n_embedding,
        tied=tied,
        head_rows=int(head_weight.shape[0]) if head_weight is not None else None,
        embedding_modules=tuple(names),
    )


def nonembedding_params(config: Any) -> int:
    """S for a transformers config, config dict, local model dir / config.json, or a torch module.

    GPT-2 124M and Pythia-160m both give 85,056,000.
    """
    return parameter_counts(config).n_nonembedding


def max_context(config: Any) -> int | None:
    """Longest input the architecture accepts, from the usual config fields."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def logit_softcap(config: Any) -> float | None:
    """The config's final-logit softcap (Gemma 2: logits = cap * tanh(logits / cap)), None without one."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(config, "final_logit_softcapping", None)
    return float(cap) if cap else None
