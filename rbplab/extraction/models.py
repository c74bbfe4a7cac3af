"""Describing causal language models (hub ids, local directories, GGUF files) without weights.

A model is resolved once (`rbplab.catalog.resolve`); then two steps, so that a cache lookup never
touches weights:
- `describe_model` reads only the config and the tokenizer and returns a `ModelDescription`
  whose `ModelInfo` holds the size S from the config on the meta device, the real vocabulary,
  the fingerprints, and the dtype and device the settings resolve to;
- `rbplab.extraction.weights.load_weights` then loads the weights and checks that the output
  head the rank extractor uses reproduces the model's own logits.

The real vocabulary is `len(tokenizer)`: many checkpoints pad the output layer
(Pythia 50,304 rows for 50,277 tokens; Qwen2.5 151,936 for 151,665), and those rows
are never a token of the text, so ranks are taken over the tokenizer's vocabulary.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any

from rbplab.catalog.models import ModelLoadError, ModelSpec, ResolvedModel
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.config_checks import check_weights_match
from rbplab.extraction.fingerprints import WeightFiles, identify, tokenizer_fingerprint
from rbplab.extraction.gguf_file import shared_gguf_reader
from rbplab.extraction.metadata import load_config, load_tokenizer
from rbplab.extraction.placement import DEVICE_MAP_PREFIX, resolve_dtype, select_device
from rbplab.extraction.sources import as_resolved
from rbplab.extraction.weight_files import weight_shapes


@dataclass(frozen=True)
class ModelInfo:
    """Model metadata recorded in every cache manifest."""

    name: str  # as the user named it
    revision: str | None
    fingerprint: str  # "hub:<commit>" or "sha256:<digest of weight files and config>"
    architecture: str
    n_params: int
    n_nonembedding: int  # S
    vocab_size: int  # real tokenizer vocabulary |V|
    head_rows: int  # rows of the output layer (>= vocab_size when padded)
    max_context: int | None
    dtype: str
    device: str
    bos_token_id: int | None
    source: str = ""  # what was loaded: hub id or absolute path
    gguf_file: str | None = None
    tokenizer: str = ""  # tokenizer source
    tokenizer_fingerprint: str = ""
    softcap: float | None = None  # final_logit_softcapping, applied before ranking
    trust_remote_code: bool = False  # code from the model's directory/repository was allowed to run
    # GGUF: converter placeholder entries ("[PAD<id>]", type UNUSED) at the end of the token
    # list, left out of vocab_size (see rbplab.extraction.gguf_vocab)
    placeholder_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ModelDescription:
    """What is known about a resolved model without loading its weights."""

    model: ResolvedModel
    config: Any
    tokenizer: Any
    info: ModelInfo  # dtype and device as resolved from the settings
    commit: str | None = None  # hub models: the commit the revision pointed at, used for every load
    # local models: the files the fingerprint hashed, checked again whenever their bytes are used
    weights: WeightFiles | None = None


def describe_model(
    model: ModelSpec | ResolvedModel | str, settings: ExtractionSettings | None = None
) -> ModelDescription:
    """Config, tokenizer and ModelInfo of a model, without loading weights (for cache keys);
    `settings` give the dtype, device and device map it is to run with (default: "auto").

    A hub model's revision (None = main) is resolved to its commit once, here; config, tokenizer
    and (later) weights are all loaded at that commit, so a branch moving meanwhile cannot mix them.
    """
    resolved = as_resolved(model)
    # config, tokenizer and placeholder scan share one parse of a GGUF file's header
    with shared_gguf_reader() if resolved.gguf_file else contextlib.nullcontext():
        return _describe(resolved, settings or ExtractionSettings())


def _describe(model: ResolvedModel, settings: ExtractionSettings) -> ModelDescription:
    from rbplab.catalog.sizes import logit_softcap, max_context, meta_model, parameter_counts

    device = select_device(settings.device)
    commit, fingerprint, weights = identify(model)
    # a local checkpoint is its own directory (catalog.resolve), so no revision is passed for it
    config = load_config(model, commit or (None if model.local else model.revision))
    meta = meta_model(config)  # the architecture on the meta device: no memory, no weights
    counts = parameter_counts(meta)
    limit, softcap = max_context(config), logit_softcap(config)
    check_weights_match(model, config, meta, weight_shapes(model, config))
    tokenizer, placeholders = load_tokenizer(model, commit)
    dtype = resolve_dtype(settings.dtype, device, config)
    vocab = len(tokenizer) - placeholders
    head_rows = int(counts.head_rows or len(tokenizer))
    if vocab > head_rows:
        raise ModelLoadError(
            f"tokenizer has {vocab} tokens but the model's output layer has only {head_rows} rows; "
            "the tokenizer does not belong to this model (check tokenizer=...)"
        )
    info = ModelInfo(
        name=model.model,
        revision=model.revision,
        fingerprint=fingerprint,
        architecture=counts.architecture,
        n_params=counts.n_params,
        n_nonembedding=counts.n_nonembedding,
        vocab_size=vocab,
        head_rows=head_rows,
        max_context=limit,
        dtype=dtype,
        device=f"{DEVICE_MAP_PREFIX}{settings.device_map}" if settings.device_map else str(device),
        bos_token_id=tokenizer.bos_token_id,
        source=model.location if not model.gguf_file else f"{model.location}/{model.gguf_file}",
        gguf_file=model.gguf_file,
        tokenizer=model.tokenizer or model.tokenizer_location or model.location,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        softcap=softcap,
        trust_remote_code=model.trust_remote_code,
        placeholder_tokens=placeholders,
    )
    return ModelDescription(model, config, tokenizer, info, commit, weights)
