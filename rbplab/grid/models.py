"""A model of a grid, resolved once from what the user named: `ModelRef`.

A name is a registered short name (`rbplab families`), a local Hugging Face directory, a .gguf
file or an ``org/name`` hub id. It is looked up in the registry here, once; everything
downstream (planning, extraction, the study's labels and sizes) reads the reference instead of
resolving the name again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rbplab.catalog import registry
from rbplab.core.runs import run_label


@dataclass(frozen=True)
class ModelRef:
    """One model (at one revision, once the grid expands revisions).

    family: its registry family, "" for a model outside the registry; model: the name it is
    reported under (the registry's short name, else as given); source: what the loader is handed
    (an in-repo registry model as an absolute path, a hub id or path as given); S: non-embedding
    parameters when the registry knows them (None otherwise: the model's description sizes it);
    revision: a hub revision or checkpoint (None: the final model). gguf_file, tokenizer and
    trust_remote_code are loading options (`rbplab extract`'s flags).
    """

    family: str
    model: str
    source: str
    S: float | None
    revision: str | None = None
    gguf_file: str | None = None
    tokenizer: str | None = None
    trust_remote_code: bool = False

    @property
    def registered(self) -> bool:
        return bool(self.family)

    @property
    def label(self) -> str:
        """``model`` or ``model@revision``: how the run is reported."""
        return run_label(self.model, self.revision)

    def at(self, revision: str | None) -> ModelRef:
        return replace(self, revision=revision)


def family_refs(family: str) -> list[ModelRef]:
    """Every member of a registry family, smallest S first."""
    return [
        ModelRef(row.family, row.model, registry.source_location(row.source), float(row.S))
        for row in registry.family_models(family).itertuples()
    ]


def model_ref(name: str, **options: object) -> ModelRef:
    """A registered model by short name or source, else a local path or hub id as given
    (`registry.UnknownModelError` for anything else). `options`: ModelRef's loading options."""
    row = registry.lookup_model(name)
    if row is not None:
        return ModelRef(
            row["family"], row["model"], registry.source_location(row["source"]), float(row["S"]), **options
        )
    return ModelRef("", name, registry.unregistered_location(name), None, **options)
