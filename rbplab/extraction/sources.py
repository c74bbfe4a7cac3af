"""What a model argument means: a grid's `ResolvedModel`, a `ModelSpec` or a name, as one
`ResolvedModel` (`rbplab.catalog.resolve` does the resolving: registry, paths, GGUF files,
checkpoints)."""

from __future__ import annotations

from pathlib import Path

from rbplab.catalog.models import ModelSpec, ResolvedModel, resolve


def as_resolved(model: ResolvedModel | ModelSpec | str | Path) -> ResolvedModel:
    """`model` itself when already resolved (a grid's member: no second registry lookup), else
    `model` resolved once."""
    if isinstance(model, ResolvedModel):
        return model
    return resolve(model if isinstance(model, ModelSpec) else ModelSpec(str(model)))
