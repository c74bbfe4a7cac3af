"""What a study runs: models (each resolved once), revisions, corpora and extraction settings.

The grid of a study: models x revisions x corpora under one set of extraction settings.

This is the one place a study's grid is expanded. `rbplab extract`, a study file (`rbplab run`,
`rbplab report`, the notebooks' `study_file`), `load_study` and the runner all build a `Grid` and
iterate `Grid.runs()`; nothing else turns family names into models or revisions into checkpoints.

A study file is the grid in TOML:

    models = ["micro-1-25K", "micro-2-85K", "micro-3-200K"]   # and/or families = ["pythia"]
    corpora = ["humaneval", "prose"]
    revisions = ["step1000", "step143000"]          # optional; "log:8"; or a table model -> either
    [settings]                                      # rbplab.core.ExtractionSettings fields
    max_tokens = 8000

Everything is checked when the grid is built, before any work starts: unknown keys, families,
models and corpora and invalid settings are one-line errors naming the key and what is allowed.
Revisions are checked against the model's checkpoint schedule (rbplab.catalog.registry) where one
is known (Pythia, the micro-suite): ``"log:N"`` picks N log-spaced existing checkpoints, and a
revision that does not exist is an error listing the available ones. Models without a known
schedule (other hub models) take revision names as given; they are checked when planned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from rbplab.catalog import registry
from rbplab.catalog.corpora import Corpus, CorpusError, LazyCorpus, corpus_name, list_corpora, open_corpus
from rbplab.catalog.models import ModelSpec, ResolvedModel, resolve, resolve_family, resolve_member
from rbplab.core.documents import read_toml
from rbplab.core.errors import BadFileError, InvalidTypeError, MissingFileError, RbplabError
from rbplab.core.settings import ExtractionSettings, resolve_settings

KEYS = ("families", "models", "corpora", "revisions", "settings")

CorpusLike = str | Path | Corpus | LazyCorpus


__all__ = ["Grid"]


class StudyFileError(RbplabError, ValueError):
    """A grid (a study file, its table) that cannot be run as written; the message names the key
    and the fix."""


def corpus_label(corpus: CorpusLike) -> str:
    """How a corpus is reported: a Corpus by its name, bundled and hub names as they are
    (without a hub revision), a path by its stem."""
    if isinstance(corpus, (Corpus, LazyCorpus)):
        return str(corpus.name)
    name = str(corpus)
    if name.startswith("hub:"):
        return name.split("@", 1)[0]
    if "/" not in name and not name.endswith((".jsonl", ".gz", ".txt")):
        return name
    return Path(name).name.split(".")[0]


@dataclass(frozen=True)
class GridRun:
    """One (model at a revision, corpus) of the grid: one cache entry once settings are applied."""

    model: ResolvedModel
    corpus: Corpus | LazyCorpus
    corpus_label: str

    @property
    def label(self) -> str:
        return self.model.label


@dataclass(frozen=True)
class Grid:
    """Models (each resolved once), their revisions, corpora and the extraction settings.

    `members` are the models at no revision; `revisions` maps a model name to the revisions run
    (absent: only the final model); `corpora` are names, paths or Corpus objects, opened once per
    grid (`opened`). Build one with `Grid.from_names` (models by name) or `Grid.read` (a study
    file)."""

    path: Path | None
    members: tuple[ResolvedModel, ...]
    corpora: tuple[CorpusLike, ...]
    revisions: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)
    settings: ExtractionSettings = field(default_factory=ExtractionSettings)

    # ---- what the grid holds ----------------------------------------------------------------
    def revisions_of(self, model: str) -> tuple[str | None, ...]:
        return self.revisions.get(model, (None,))

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(m.family for m in self.members if m.family))

    @property
    def models(self) -> list[str]:
        return [m.model for m in self.members]

    def checkpoints(self) -> Iterator[ResolvedModel]:
        """Every model at every revision of the grid."""
        return iter(self._located)

    @cached_property
    def _located(self) -> tuple[ResolvedModel, ...]:
        # each checkpoint located on the file system once per grid, however many corpora and
        # lookups iterate them
        return tuple(m.at(revision) for m in self.members for revision in self.revisions_of(m.model))

    @cached_property
    def opened(self) -> tuple[Corpus | LazyCorpus, ...]:
        """The corpora, each opened once for the whole grid (a hub corpus resolves its commit
        here and reads its documents only if some run is not cached)."""
        return tuple(c if isinstance(c, (Corpus, LazyCorpus)) else open_corpus(c) for c in self.corpora)

    def runs(self, outer: Literal["model", "corpus"] = "model") -> Iterator[GridRun]:
        """Every (checkpoint, corpus): models outer (extraction: each model's weights load once)
        or corpora outer (the order a study's tables list them)."""
        corpora = list(zip(self.opened, (corpus_label(c) for c in self.corpora), strict=True))
        if outer == "model":
            for ref in self.checkpoints():
                for corpus, label in corpora:
                    yield GridRun(ref, corpus, label)
        else:
            for corpus, label in corpora:
                for ref in self.checkpoints():
                    yield GridRun(ref, corpus, label)

    def to_dict(self) -> dict:
        """The grid as plain data (the report's index, the results file)."""
        return {
            "study_file": str(self.path) if self.path is not None else None,
            "families": self.families,
            "models": [
                {
                    "family": m.family or "custom",
                    "model": m.model,
                    "S": m.S,
                    "revisions": [r for r in self.revisions_of(m.model) if r is not None] or None,
                }
                for m in self.members
            ],
            "corpora": [
                corpus_label(c) if isinstance(c, (Corpus, LazyCorpus)) else str(c) for c in self.corpora
            ],
            "settings": self.settings.to_dict(),
            "settings_changed": self.settings.to_dict(changed_only=True),
        }

    # ---- building one -------------------------------------------------------------------------
    @classmethod
    def from_names(
        cls,
        names: str | Path | ModelSpec | ResolvedModel | Iterable[str | Path | ModelSpec | ResolvedModel],
        corpora: CorpusLike | Iterable[CorpusLike] | None = None,
        settings: ExtractionSettings | Mapping[str, Any] | None = None,
        *,
        models: Iterable[str] | None = None,
        revisions: str | Sequence[str] | None = None,
        **overrides: Any,
    ) -> Grid:
        """A grid of named models on `corpora`, under `settings`.

        names: one or several of registry families (every member; `models` keeps a subset of them
        by short name), registered models, local model paths and hub ids (a name that is both a
        family and a model, such as "gpt2", is the family), or models with loading options
        (`rbplab.catalog.ModelSpec`, or one already resolved: `rbplab.catalog.resolve`).
        corpora: bundled names, ``hub:<name>``, paths or Corpus objects (default: every bundled
        corpus). settings: `ExtractionSettings` or a mapping of its fields; its fields may also be
        given as keywords (`overrides`). revisions: names or ``"log:N"`` for every model, checked
        against its checkpoint schedule (default: the final model, or the revision a ModelSpec
        names). A study file is `Grid.read`.

        Examples
        --------
        >>> grid = Grid.from_names(["micro-1-25K", "micro-2-85K"], ["prose"])
        >>> [(m.model, m.S) for m in grid.members], grid.corpora
        ([('micro-1-25K', 25472.0), ('micro-2-85K', 84912.0)], ('prose',))
        """
        given = [names] if isinstance(names, (str, Path, ModelSpec, ResolvedModel)) else list(names)
        if not given:
            raise StudyFileError("give at least one model family or model, e.g. 'micro' (rbplab families)")
        members: list[ResolvedModel] = []
        families: list[str] = []
        for name in given:
            if isinstance(name, (ModelSpec, ResolvedModel)):
                members.append(name if isinstance(name, ResolvedModel) else resolve(name))
                continue
            refs = _family_or_model(str(name))
            families += [str(name)] if refs is not None else []
            members += refs if refs is not None else [_named_model(str(name))]
        members = list({m.model: m for m in members}.values())
        if models is not None:
            members = _subset(members, models, families)
        # every name checked and spelled here, so an unknown corpus is one line before any lookup
        opened = [corpus_name(c) for c in _as_list(corpora)] if corpora is not None else _bundled_corpora()
        if not opened:
            raise StudyFileError("no corpora given and none bundled in data/corpora")
        if revisions is not None:
            chosen = {m.model: _checked(m.model, revisions, "revisions", "") for m in members}
        else:  # a model given at a revision (a ModelSpec's, a resolved checkpoint) is run there
            chosen = {m.model: (m.revision,) for m in members if m.revision is not None}
        return cls(None, tuple(members), tuple(opened), chosen, resolve_settings(settings, **overrides))

    @classmethod
    def read(cls, study: str | Path | Mapping[str, Any]) -> Grid:
        """A study file (TOML), or its table as read from one (a dict: what `rbplab demo` hands
        the training notebook), validated. The file must be a regular file of at most
        MAX_STUDY_FILE_BYTES of UTF-8 text (a device, a FIFO, a huge or binary file is a one-line
        StudyFileError); relative corpus paths in a file are relative to its folder."""
        if isinstance(study, Mapping):
            return cls._from_table(study, None)
        if not isinstance(study, (str, Path)):
            raise StudyFileError(
                f"Grid.read takes a study file's path or its table, not {type(study).__name__}"
            )
        path = Path(study).expanduser()
        try:
            data = read_toml(path, "study file", MAX_STUDY_FILE_BYTES)
        except (MissingFileError, BadFileError) as err:
            raise StudyFileError(str(err)) from None
        except OSError as err:
            raise StudyFileError(f"cannot read study file {path} ({err.strerror or err})") from None
        return cls._from_table(data, path.resolve())

    @classmethod
    def _from_table(cls, data: Mapping[str, Any], path: Path | None) -> Grid:
        """A study file's table (as read from TOML), validated; `path`: the file it came from."""
        where = f"{path}: " if path else ""
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise StudyFileError(
                f"{where}unknown key(s) {', '.join(unknown)}; a study file has {', '.join(KEYS)}"
            )
        if "families" not in data and "models" not in data:
            raise StudyFileError(f"{where}give 'families' and/or 'models' (see `rbplab families`)")
        families = _strings(data["families"], "families") if "families" in data else []
        model_names = _strings(data["models"], "models") if "models" in data else []
        members = _resolve_members(families, model_names, where)
        if "corpora" not in data:
            raise StudyFileError(
                f"{where}give 'corpora' (bundled names, hub:<name> or paths; see `rbplab corpora`)"
            )
        base = path.parent if path else Path.cwd()
        try:  # a relative path is relative to the study file's folder
            corpora = [corpus_name(c, base) for c in _strings(data["corpora"], "corpora")]
        except CorpusError as err:
            raise StudyFileError(f"{where}'corpora': {err}") from None
        revisions = _revisions(data.get("revisions"), [m.model for m in members], where)
        settings_table = data.get("settings", {})
        if not isinstance(settings_table, Mapping):
            raise StudyFileError(f"{where}'settings' must be a table ([settings]), got {settings_table!r}")
        try:
            settings = ExtractionSettings.from_mapping(settings_table)
        except ValueError as err:
            raise StudyFileError(f"{where}[settings]: {err}") from None
        return cls(path, tuple(members), tuple(corpora), revisions, settings)


# A study file names models, corpora and a few settings: a few KB. The bound keeps /dev/zero or a
# multi-GB file from being read whole.
MAX_STUDY_FILE_BYTES = 1 << 20


def _resolve_members(families: list[str], names: list[str], where: str) -> list[ResolvedModel]:
    """Each family's members, then each named model, resolved once; repeats dropped."""
    members: list[ResolvedModel] = []
    try:
        for family in families:
            members += resolve_family(family)
        members += [resolve_member(name) for name in names]
    except (registry.UnknownFamilyError, registry.UnknownModelError) as err:
        raise StudyFileError(f"{where}{err}") from None
    return list({m.model: m for m in members}.values())


def _family_or_model(name: str) -> list[ResolvedModel] | None:
    """The members of family `name`, or None when no family has that name."""
    try:
        return resolve_family(name)
    except registry.UnknownFamilyError:
        return None


def _named_model(name: str) -> ResolvedModel:
    """A name that is not a family: a model, or (when it is not one either and looks closer to
    a family than to a model) the unknown-family error with its suggestion."""
    try:
        return resolve_member(name)
    except registry.UnknownModelError as err:
        if "did you mean" in str(err) or "/" in name or name.endswith(".gguf"):
            raise
        registry.family_models(name)  # raises UnknownFamilyError naming the known families
        raise


def _subset(members: list[ResolvedModel], models: Iterable[str], families: list[str]) -> list[ResolvedModel]:
    wanted = set(_as_list(models))
    unknown = sorted(wanted - {m.model for m in members})
    if unknown:
        raise StudyFileError(
            f"models {unknown} are not in families {families}; members: {[m.model for m in members]}"
        )
    return [m for m in members if m.model in wanted]


def _as_list(value: Any) -> list:
    if isinstance(value, (str, Path, Corpus, LazyCorpus)):
        return [value]
    return list(value)


def _bundled_corpora() -> list[str]:
    table = list_corpora()
    return table.loc[table["origin"] == "bundled", "name"].tolist()


def _strings(value: Any, key: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise StudyFileError(f"study file key '{key}' must be a non-empty list of names, got {value!r}")
    return list(dict.fromkeys(items))


def _revisions(value: Any, models: list[str], where: str) -> dict[str, tuple[str | None, ...]]:
    if value is None:
        return {}
    if isinstance(value, (list, str)):
        return {m: _checked(m, value, "revisions", where) for m in models}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(models))
        if unknown:
            raise StudyFileError(
                f"{where}'revisions' names models not in the study: {', '.join(unknown)}; "
                f"models: {', '.join(models)}"
            )
        return {m: _checked(m, v, f"revisions.{m}", where) for m, v in value.items()}
    raise StudyFileError(
        f"{where}'revisions' must be a list, \"log:N\" or a table model -> either, got {value!r}"
    )


def _checked(model: str, value: Any, key: str, where: str) -> tuple[str, ...]:
    """`value` (names or "log:N") as revisions of `model`, checked against its schedule."""
    try:
        return tuple(registry.select_revisions(model, _strings(value, key)))
    except registry.UnknownRevisionError as err:
        raise StudyFileError(f"{where}'{key}': {err}") from None


def require_grid(value: Any, where: str) -> Grid:
    """`value` itself when it is a Grid; anything else (names, a path, a table) is a one-line
    InvalidTypeError saying how to make one, so no function guesses what a value names."""
    if isinstance(value, Grid):
        return value
    raise InvalidTypeError(
        f"{where} takes a rbplab.grid.Grid, not {type(value).__name__}: make one with "
        "Grid.from_names(names, corpora, ...) or Grid.read(study_file)"
    )
