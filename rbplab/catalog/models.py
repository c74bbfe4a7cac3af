"""One model as the user names it (`ModelSpec`), resolved once (`resolve` -> `ResolvedModel`).

A name is a registered short name, a local Hugging Face directory, a .gguf file (or a directory
holding one), or an ``org/name`` hub id. `resolve` reads the registry once and looks at the file
system, never at a config or a weight; every later step (describing, fingerprinting, loading,
keying) reads the `ResolvedModel` instead of asking the registry or the file system again. How the
model runs (dtype, device, device map) is not part of it: that is `ExtractionSettings`.

A local model directory may hold training checkpoints (the micro-suite, scripts/train_micro.py):
``<dir>/checkpoints/step-<n>/`` are loaded with ``revision="step-<n>"``, exactly as a hub revision
(``checkpoint_directory``); the directory itself is the final checkpoint (``main``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog import registry
from rbplab.catalog.registry import CHECKPOINTS_DIR, Schedule, directory_schedule, member_schedule
from rbplab.core.documents import file_kind
from rbplab.core.errors import RbplabError, natural_sorted
from rbplab.core.runs import run_label


class ModelLoadError(RbplabError, ValueError):
    """A model that cannot be loaded as asked; the message says what to pass instead."""


@dataclass(frozen=True)
class ModelSpec:
    """A model as the user names it, with its loading options."""

    name_or_path: str  # hub id, registered short name, local HF dir, or a .gguf file path
    revision: str | None = None  # hub revision (e.g. "step143000") or local checkpoint ("step-98")
    gguf_file: str | None = None  # GGUF file name inside name_or_path dir (or name_or_path is the file)
    tokenizer: str | None = None  # tokenizer source override (required for GGUF without tokenizer)
    trust_remote_code: bool = False  # run Python code shipped with the model (opt-in; enters the cache key)


@dataclass(frozen=True)
class ResolvedModel:
    """One model resolved once: what was asked, where it loads from, how it is named and keyed, and
    what the registry says of it. A grid's members are ResolvedModels, so planning, extraction and a
    study's labels and sizes read this instead of asking the registry or the file system again."""

    # the request as given (name, revision, loading options): `at` asks it again at another revision
    asked: ModelSpec
    model: str  # the name runs are reported under: the registry's short name, else as given
    location: str  # hub id or absolute directory path (a checkpoint's own folder)
    gguf_file: str | None  # file name inside location
    local: bool
    # machine-independent name that enters the cache key: registry short name, hub id, or
    # file/directory name
    keyed_name: str
    # The revision as it enters a cache key: a local model directory's final checkpoint named by
    # revision (``main``, or its last ``step-<n>``) is the directory itself, so it keys as no
    # revision and shares the final model's cache entries; hub revisions are kept as given.
    keyed_revision: str | None = None
    tokenizer_location: str | None = None  # the model's own, when not `location` (a checkpoint's base)
    source: str = ""  # what the name loads from before a revision is chosen (`at` starts there)
    family: str = ""  # registry family; "" outside the registry
    S: float | None = None  # the registry's non-embedding size (None: the description sizes it)
    max_context: int | None = None  # the registry's position limit, checked before any loading

    @property
    def revision(self) -> str | None:
        """As asked (None: the final model)."""
        return self.asked.revision

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer override as given (None: the model's own)."""
        return self.asked.tokenizer

    @property
    def trust_remote_code(self) -> bool:
        return self.asked.trust_remote_code

    @property
    def registered(self) -> bool:
        return bool(self.family)

    @property
    def label(self) -> str:
        """``model`` or ``model@revision``: how the run is reported."""
        return run_label(self.model, self.revision)

    @property
    def schedule(self) -> Schedule | None:
        """Its checkpoint schedule: its family's, else its folder's (None if unknown); the registry
        is not read again."""
        return member_schedule(self.family, self.source if self.local else None, self.keyed_name)

    def at(self, revision: str | None) -> ResolvedModel:
        """The same model at another revision, located again on the file system (never the registry)."""
        if revision == self.revision:
            return self
        # the request's own options: a GGUF file found in a directory was not asked for, and asking
        # for it would pass over the directory's checkpoints
        located = _locate(replace(self.asked, revision=revision), self.source)
        if not self.registered:  # keyed by what it is at that revision, as `resolve` keys it
            return replace(_named(located), model=self.model)
        return replace(
            located,
            model=self.model,
            keyed_name=self.keyed_name,
            family=self.family,
            S=self.S,
            max_context=self.max_context,
        )


def resolve(ref: ModelSpec | str | Path) -> ResolvedModel:
    """Map a model name (with its options) to a loadable location (registry names, paths, GGUF
    files, hub ids), with its names, keyed revision and registry facts. The registry is read once."""
    spec = ref if isinstance(ref, ModelSpec) else ModelSpec(str(ref))
    row, location = _registry_entry(spec.name_or_path)
    return _resolved(spec, location, row)


def resolve_member(name: str, **options: Any) -> ResolvedModel:
    """A study's model: registered (by short name or source), else a local path or hub id as given
    (`registry.UnknownModelError` for anything else). `options`: `ModelSpec`'s loading options."""
    row = registry.lookup_model(name)
    if row is None:
        return _resolved(ModelSpec(name, **options), registry.unregistered_location(name), None)
    location = registry.source_location(str(row["source"]))
    return _resolved(ModelSpec(location, **options), location, row)


def resolve_family(family: str, **options: Any) -> list[ResolvedModel]:
    """Every member of a registry family, smallest S first; `options`: `ModelSpec`'s loading options."""
    members = []
    for _, row in registry.family_models(family).iterrows():
        location = registry.source_location(str(row["source"]))
        members.append(_resolved(ModelSpec(location, **options), location, row))
    return members


def _resolved(spec: ModelSpec, location: str, row: Any) -> ResolvedModel:
    """`spec` located at `location`, named and sized by its registry `row` (None: unregistered)."""
    model = _locate(spec, location)
    if row is not None:
        limit = row.get("max_context")
        return replace(
            model,
            model=str(row["model"]),
            keyed_name=str(row["model"]),
            family=str(row["family"]),
            S=float(row["S"]),
            max_context=None if pd.isna(limit) else int(limit),
        )
    return _named(model)


def _named(model: ResolvedModel) -> ResolvedModel:
    """An unregistered model keyed by what it is: its hub id (and GGUF file), else its file or
    folder name."""
    if not model.local:
        keyed = model.location + (f"/{model.gguf_file}" if model.gguf_file else "")
    else:
        keyed = model.gguf_file or Path(model.location).name
    return replace(model, keyed_name=keyed)


def _registry_entry(name: str) -> tuple[Any, str]:
    """(registry row or None, what `name` loads from). An existing path loads without a registry
    (its row, if any, only names it); any other name needs a readable registry, whose errors
    propagate."""
    if Path(name).expanduser().exists():
        try:
            return registry.lookup_model(name), name
        except (OSError, ValueError):  # no readable registry: the path names itself
            return None, name
    row = registry.lookup_model(name)
    if row is not None:
        return row, registry.source_location(str(row["source"]))
    return None, _unregistered(name)


def _locate(spec: ModelSpec, name: str) -> ResolvedModel:
    """Where `name` loads from as `spec` asks (its keyed name still to be given)."""

    def at(location: str, gguf_file: str | None, local: bool, **rest: Any) -> ResolvedModel:
        return ResolvedModel(
            spec, spec.name_or_path, location, gguf_file, local, keyed_name="", source=name, **rest
        )

    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(
                f"{path} is a file but not a .gguf file; pass a GGUF file, a model directory or a hub id"
            )
        if spec.gguf_file and spec.gguf_file != path.name:
            raise ModelLoadError(f"gguf_file={spec.gguf_file!r} contradicts the GGUF path {path}")
        return at(str(path.resolve().parent), path.name, True)
    if path.is_dir():
        directory = path.resolve()
        if spec.revision and not spec.gguf_file:
            checkpoint = checkpoint_directory(directory, spec.revision)
            if checkpoint != directory:
                has_tokenizer = any(
                    (checkpoint / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
                )
                return at(
                    str(checkpoint),
                    None,
                    True,
                    keyed_revision=spec.revision,
                    tokenizer_location=None if has_tokenizer else str(directory),
                )
        if spec.gguf_file:
            if not (directory / spec.gguf_file).is_file():
                raise ModelLoadError(f"GGUF file {spec.gguf_file!r} not found in {directory}")
            return at(str(directory), spec.gguf_file, True)
        if (directory / "config.json").is_file():
            return at(str(directory), None, True)
        ggufs = sorted(p.name for p in directory.glob("*.gguf"))
        if len(ggufs) == 1:
            return at(str(directory), ggufs[0], True)
        if ggufs:
            raise ModelLoadError(
                f"{directory} holds several GGUF files {ggufs}; choose one with gguf_file=..."
            )
        raise ModelLoadError(
            f"{directory} is not a model directory: it has no config.json and no .gguf file "
            "(expected a Hugging Face model directory saved with save_pretrained, or a GGUF file)"
        )
    if os.path.lexists(path):  # a device, a FIFO, a dangling link: never a hub id
        kind = file_kind(os.lstat(path).st_mode) if not path.is_symlink() else "a link to nothing"
        raise ModelLoadError(
            f"{path} is {kind}, not a model: pass a GGUF file, a model directory or a hub id"
        )
    return at(name, spec.gguf_file, False, keyed_revision=spec.revision)


def checkpoint_directory(directory: str | Path, revision: str | None) -> Path:
    """The folder holding `revision` of a local model directory.

    None and ``main`` are the directory itself (the final model); ``step-<n>`` is
    ``<directory>/checkpoints/step-<n>/`` (a model directory of its own, config.json and weights),
    or the directory itself when its schedule says n is the final step. Anything else is a one-line
    ModelLoadError listing the revisions that exist.
    """
    directory = Path(directory)
    if revision is None or revision == "main":
        return directory
    checkpoints = directory / CHECKPOINTS_DIR
    candidate = checkpoints / revision
    if "/" not in revision and (candidate / "config.json").is_file():
        return candidate
    schedule = directory_schedule(directory)
    final = schedule.revision(schedule.final_step) if schedule is not None else None
    if revision == final:
        return directory
    stored = (
        [p.name for p in checkpoints.iterdir() if (p / "config.json").is_file()]
        if checkpoints.is_dir()
        else []
    )
    available = natural_sorted(stored) + ([final] if final else []) + ["main"]
    raise ModelLoadError(
        f"{directory.name} has no revision {revision!r}; available: {', '.join(dict.fromkeys(available))} "
        f"(checkpoints are the folders of {checkpoints})"
    )


def _unregistered(name: str) -> str:
    try:
        return registry.unregistered_location(name)
    except registry.UnknownModelError as err:
        try:
            families = ", ".join(registry.family_names())
        except (OSError, ValueError):
            families = "(registry unavailable)"
        raise registry.UnknownModelError(
            f"{err}. Known families: {families} (rbplab families lists their members). "
            "A model is a registered name, a local model directory, a .gguf file or an 'org/name' hub id."
        ) from None
