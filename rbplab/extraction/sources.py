"""What a model argument means: a `ModelSpec`, a grid's `ModelRef` or a name, as one `ModelSpec`.

Resolving the spec (registry, paths, GGUF files, checkpoints) is `rbplab.catalog.resolve`.
"""

from __future__ import annotations

from pathlib import Path

from rbplab.catalog.models import ModelSpec
from rbplab.grid import ModelRef


def as_spec(model: ModelSpec | ModelRef | str | Path) -> ModelSpec:
    """A ModelSpec from a spec, a grid's ModelRef or a name/path."""
    if isinstance(model, ModelRef):
        return ModelSpec(
            model.source,
            revision=model.revision,
            gguf_file=model.gguf_file,
            tokenizer=model.tokenizer,
            trust_remote_code=model.trust_remote_code,
        )
    return model if isinstance(model, ModelSpec) else ModelSpec(str(model))
