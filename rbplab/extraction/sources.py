"""Where a model comes from: what the user named (`ModelSpec`) and where it loads from (`Source`).

A name is a registered short name, a local Hugging Face directory, a .gguf file (or a directory
holding one), or an ``org/name`` hub id. Nothing here reads a config or a weight.

A local model directory may hold training checkpoints (the micro-suite, scripts/train_micro.py):
``<dir>/checkpoints/step-<n>/`` are loaded with ``revision="step-<n>"``, exactly as a hub revision
(``checkpoint_directory``); the directory itself is the final checkpoint (``main``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.core.settings import DTYPE_CHOICES, check_device, check_device_map
from rbplab.grid import ModelRef
from rbplab.store.schedules import CHECKPOINTS_DIR, directory_schedule, natural_sorted


class ModelLoadError(RbplabError, ValueError):
    """A model that cannot be loaded as asked; the message says what to pass instead."""


class RemoteCodeError(ModelLoadError):
    """A model that needs Python code from its own directory or repository, which was not allowed."""


@dataclass(frozen=True)
class ModelSpec:
    name_or_path: str  # hub id, registered short name, local HF dir, or a .gguf file path
    revision: str | None = None  # hub revision (e.g. "step143000")
    gguf_file: str | None = None  # GGUF file name inside name_or_path dir (or name_or_path is the file)
    tokenizer: str | None = None  # tokenizer source override (required for GGUF without tokenizer)
    dtype: str = "auto"  # "auto" | "float32" | "bfloat16" | "float16"
    device: str = "auto"  # "auto" (cuda > mps > cpu) | explicit
    device_map: str | None = None  # e.g. "auto" for models larger than one GPU
    trust_remote_code: bool = False  # run Python code shipped with the model (opt-in; enters the cache key)

    def __post_init__(self) -> None:
        # the settings' own checks, so a spec made in Python is refused before any work too
        if self.dtype not in DTYPE_CHOICES:
            raise InvalidArgumentError(f"dtype must be one of {DTYPE_CHOICES}, got {self.dtype!r}")
        check_device(self.device)
        check_device_map(self.device_map)


def as_spec(model: ModelSpec | ModelRef | str | Path, **overrides: Any) -> ModelSpec:
    """A ModelSpec from a spec, a grid's ModelRef or a name/path; `overrides` (non-None values)
    replace fields."""
    if isinstance(model, ModelRef):
        spec = ModelSpec(
            model.source,
            revision=model.revision,
            gguf_file=model.gguf_file,
            tokenizer=model.tokenizer,
            trust_remote_code=model.trust_remote_code,
        )
    else:
        spec = model if isinstance(model, ModelSpec) else ModelSpec(str(model))
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(spec, **changes) if changes else spec


@dataclass(frozen=True)
class Source:
    """Where a model loads from, resolved once; every later step reads these fields instead of
    asking the registry or the file system again."""

    location: str  # hub id or absolute directory path
    gguf_file: str | None  # file name inside location
    local: bool
    tokenizer_location: str | None = None  # when not `location` (checkpoints share their model's)
    label: str = ""  # machine-independent name: registry short name, hub id, or file/directory name
    # The revision as it enters a cache key: a local model directory's final checkpoint named by
    # revision (``main``, or its last ``step-<n>``) is the directory itself, so it keys as no
    # revision and shares the final model's cache entries; hub revisions are kept as given.
    keyed_revision: str | None = None


def resolve_source(spec: ModelSpec) -> Source:
    """Map a user-given model name to a loadable location (registry names, paths, GGUF files, hub
    ids), with its label and keyed revision. The registry is read once."""
    row, location = _registry_entry(spec.name_or_path)
    source = _locate(spec, location, str(row["model"]) if row is not None else "")
    if source.label:
        return source
    if not source.local:
        label = source.location + (f"/{source.gguf_file}" if source.gguf_file else "")
    else:
        label = source.gguf_file or Path(source.location).name
    return replace(source, label=label)


def _registry_entry(name: str) -> tuple[Any, str]:
    """(registry row or None, what `name` loads from), with one read of the registry. An existing
    path loads without one (its row, if any, only names it); any other name needs a readable
    registry, whose errors propagate."""
    from rbplab.store import registry

    if Path(name).expanduser().exists():
        try:
            return registry.lookup_model(name), name
        except (OSError, ValueError):  # no readable registry: the path names itself
            return None, name
    row = registry.lookup_model(name)
    if row is not None:
        return row, registry.resolve_source(str(row["source"]))
    return None, _unregistered(name)


def _locate(spec: ModelSpec, name: str, label: str) -> Source:
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(
                f"{path} is a file but not a .gguf file; pass a GGUF file, a model directory or a hub id"
            )
        if spec.gguf_file and spec.gguf_file != path.name:
            raise ModelLoadError(f"gguf_file={spec.gguf_file!r} contradicts the GGUF path {path}")
        return Source(str(path.resolve().parent), path.name, True, label=label)
    if path.is_dir():
        directory = path.resolve()
        if spec.revision and not spec.gguf_file:
            checkpoint = checkpoint_directory(directory, spec.revision)
            if checkpoint != directory:
                has_tokenizer = any(
                    (checkpoint / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
                )
                tokenizer_location = None if has_tokenizer else str(directory)
                return Source(str(checkpoint), None, True, tokenizer_location, label, spec.revision)
        if spec.gguf_file:
            if not (directory / spec.gguf_file).is_file():
                raise ModelLoadError(f"GGUF file {spec.gguf_file!r} not found in {directory}")
            return Source(str(directory), spec.gguf_file, True, label=label)
        if (directory / "config.json").is_file():
            return Source(str(directory), None, True, label=label)
        ggufs = sorted(p.name for p in directory.glob("*.gguf"))
        if len(ggufs) == 1:
            return Source(str(directory), ggufs[0], True, label=label)
        if ggufs:
            raise ModelLoadError(
                f"{directory} holds several GGUF files {ggufs}; choose one with gguf_file=..."
            )
        raise ModelLoadError(
            f"{directory} is not a model directory: it has no config.json and no .gguf file "
            "(expected a Hugging Face model directory saved with save_pretrained, or a GGUF file)"
        )
    return Source(name, spec.gguf_file, False, label=label, keyed_revision=spec.revision)


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
    from rbplab.store import registry

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
