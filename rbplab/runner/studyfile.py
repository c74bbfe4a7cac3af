"""A study file: the grid of a study (models x revisions x corpora, one settings table) in TOML.

    models = ["micro-1-25K", "micro-2-85K", "micro-3-200K"]   # and/or families = ["pythia"]
    corpora = ["humaneval", "prose"]
    revisions = ["step1000", "step143000"]          # optional; "log:8"; or a table model -> either
    [settings]                                      # rbplab.core.ExtractionSettings fields
    max_tokens = 8000

Everything is checked on the driver, before any work starts: unknown keys, unknown families,
models and corpora, and invalid settings are one-line errors naming the key and what is allowed.
Revisions are checked against the model's checkpoint schedule (rbplab.store.schedules) where one
is known (Pythia, the micro-suite): ``"log:N"`` picks N log-spaced existing checkpoints, and a
revision that does not exist is an error listing the available ones. Models without a known
schedule (other hub models) take revision names as given; they are checked when planned.
The same file drives `rbplab run`, `rbplab report` and the notebooks' `study_file` parameter, so
the grid that was run is the grid that is analysed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rbplab.core.settings import ExtractionSettings
from rbplab.store import registry, schedules
from rbplab.store.corpora import list_corpora

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KEYS = ("families", "models", "corpora", "revisions", "settings")


class StudyFileError(ValueError):
    """A study file that cannot be run as written; the message names the key and the fix."""


@dataclass(frozen=True)
class StudyMember:
    """One model of the grid: its registry family (or "" for a model outside the registry), the
    name it is reported under, what to load, and its size S when the registry knows it."""

    family: str
    model: str
    source: str
    S: float | None

    def loadable(self) -> str:
        """What the model loader is handed: a registry source resolved (in-repo models become
        absolute paths); a model outside the registry as given."""
        return registry.resolve_model(self.source) if self.family else self.source


@dataclass(frozen=True)
class StudyFile:
    path: Path | None
    members: tuple[StudyMember, ...]
    corpora: tuple[str, ...]
    revisions: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)
    settings: ExtractionSettings = field(default_factory=ExtractionSettings)

    def revisions_of(self, model: str) -> tuple[str | None, ...]:
        return self.revisions.get(model, (None,))

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(m.family for m in self.members if m.family))

    @property
    def models(self) -> list[str]:
        return [m.model for m in self.members]


def _strings(value: Any, key: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise StudyFileError(f"study file key '{key}' must be a non-empty list of names, got {value!r}")
    return list(dict.fromkeys(items))


def parse_study(data: Mapping[str, Any], path: Path | None = None) -> StudyFile:
    """Validate a study's table (as read from TOML) into a StudyFile."""
    where = f"{path}: " if path else ""
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise StudyFileError(
            f"{where}unknown key(s) {', '.join(unknown)}; a study file has {', '.join(KEYS)}"
        )
    if "families" not in data and "models" not in data:
        raise StudyFileError(f"{where}give 'families' and/or 'models' (see `rbplab families`)")
    members: list[StudyMember] = []
    try:
        for family in _strings(data["families"], "families") if "families" in data else []:
            for row in registry.family_models(family).itertuples():
                members.append(StudyMember(row.family, row.model, row.source, float(row.S)))
        for name in _strings(data["models"], "models") if "models" in data else []:
            row = registry.lookup_model(name)
            if row is not None:
                members.append(StudyMember(row["family"], row["model"], row["source"], float(row["S"])))
            else:  # a local directory, .gguf file or hub id (checked when it is planned)
                registry.resolve_model(name)
                members.append(StudyMember("", name, name, None))
    except (registry.UnknownFamilyError, registry.UnknownModelError) as err:
        raise StudyFileError(f"{where}{err}") from None
    members = list({m.model: m for m in members}.values())
    if "corpora" not in data:
        raise StudyFileError(
            f"{where}give 'corpora' (bundled names, hub:<name> or paths; see `rbplab corpora`)"
        )
    corpora = _strings(data["corpora"], "corpora")
    known = set(list_corpora()["name"])
    base = path.parent if path else Path.cwd()
    for name in corpora:
        if (
            name not in known
            and not (base / name).expanduser().exists()
            and not Path(name).expanduser().exists()
        ):
            raise StudyFileError(
                f"{where}unknown corpus {name!r} in 'corpora'; "
                f"known: {', '.join(sorted(known))}, or an existing path"
            )
    corpora = [name if name in known or Path(name).exists() else str(base / name) for name in corpora]
    revisions = _revisions(data.get("revisions"), [m.model for m in members], where)
    settings_table = data.get("settings", {})
    if not isinstance(settings_table, Mapping):
        raise StudyFileError(f"{where}'settings' must be a table ([settings]), got {settings_table!r}")
    try:
        settings = ExtractionSettings.from_mapping(settings_table)
    except ValueError as err:
        raise StudyFileError(f"{where}[settings]: {err}") from None
    return StudyFile(path, tuple(members), tuple(corpora), revisions, settings)


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
        return tuple(schedules.select_revisions(model, _strings(value, key)))
    except schedules.UnknownRevisionError as err:
        raise StudyFileError(f"{where}'{key}': {err}") from None


def read_study_file(path: str | Path) -> StudyFile:
    """Read and validate a study TOML file."""
    path = Path(path).expanduser()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyFileError(f"study file {path} not found") from None
    except tomllib.TOMLDecodeError as err:
        raise StudyFileError(f"{path}: not valid TOML ({err})") from None
    return parse_study(data, path.resolve())
