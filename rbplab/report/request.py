"""What a report analyses: its request, one `rbplab.grid.Grid`, handed to every notebook as the
parameters their `parameters` cells declare (a study file's path, else families, models, corpora
and settings), and checked before any notebook runs, so that an unknown name, a corpus that cannot
be opened or a run missing from the cache is one error rather than a failed notebook each.

The index page and the results file state this grid, so "corpora: null" (the notebooks' own
default) never stands in for the corpora that were analysed.

The training checkpoints the cache already holds (`cached_checkpoints`), which the report hands the
training-dynamics notebook when nothing names its checkpoints (what `rbplab demo` scored), and
which the notebook finds the same way when opened with its defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd

from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.grid import Grid
from rbplab.report.execution import TRAINING_NOTEBOOK, declared_parameters

# The notebooks' parameters that name the grid: a report sets them from its Grid, never from
# `parameters`, so the index states exactly what the notebooks analysed.
GRID_PARAMETERS = ("families", "models", "corpora", "settings", "study_file")
# The parameters run_report sets from its own arguments.
RUN_PARAMETERS = ("cache_dir", "extract", "output_dir")

T = TypeVar("T")


def resolved(resolve: Callable[[], T]) -> T:
    """resolve(), its failure one line: rbplab's own errors as they are, others named as the
    grid's."""
    try:
        return resolve()
    except RbplabError:
        raise
    except (ValueError, LookupError, OSError) as err:
        problem = " ".join(str(err).split()) or type(err).__name__
        raise InvalidArgumentError(f"the report's grid cannot be resolved: {problem}") from None


def check_parameters(parameters: Mapping[str, object]) -> None:
    """Refuse notebook parameters that would replace the grid or run_report's own arguments."""
    for name in parameters:
        if name in GRID_PARAMETERS:
            raise InvalidArgumentError(
                f"parameter {name!r} is part of the report's grid: give it in the grid "
                "(run_report(Grid.from_names(...)) or Grid.read(study_file), or rbplab report's "
                "--family/--corpus/settings)"
            )
        if name in RUN_PARAMETERS:
            raise InvalidArgumentError(f"parameter {name!r} is run_report's own: pass run_report({name}=...)")


def notebook_parameters(grid: Grid) -> dict[str, object]:
    """The grid as the notebooks' parameters: a study file's path (the notebooks read the file),
    else families, models (None: every member of the families), corpora and the settings that
    differ from the defaults. A grid the notebooks cannot be handed as such (one changed after its
    file was read, or with revisions, or models outside the registry's families, or Corpus
    objects) is refused in one line: write it as a study file."""
    fix = "write the grid as a study file (rbplab run's TOML) and report on that"
    if grid.path is not None:
        read = resolved(lambda: Grid.read(grid.path))
        if {**read.to_dict(), "study_file": None} != {**grid.to_dict(), "study_file": None}:
            raise InvalidArgumentError(
                f"the grid differs from its study file {grid.path}, which the notebooks read: "
                "make the changes in the file"
            )
        return {"study_file": str(read.path)}
    if any(grid.revisions_of(m.model) != (None,) for m in grid.members):
        raise InvalidArgumentError(
            f"the notebooks take checkpoints (revisions) from a study file only: {fix}"
        )
    outside = [m.model for m in grid.members if not m.family]
    if outside:
        raise InvalidArgumentError(f"the notebooks take registry families, and {outside} are in none: {fix}")
    if not all(isinstance(c, str) for c in grid.corpora):
        raise InvalidArgumentError(f"the notebooks take corpora by name or path, not Corpus objects: {fix}")
    families = grid.families
    every = [m.model for m in Grid.from_names(families).members]
    return {
        "families": families,
        "models": None if grid.models == every else grid.models,
        "corpora": list(grid.corpora),
        "settings": grid.settings.to_dict(changed_only=True),
        "study_file": None,
    }


def reads_grid(paths: Sequence[Path], study_file: bool) -> bool:
    """Whether some notebook reads the grid's runs from the cache: one declaring `extract`, other
    than the training notebook without a study file (it reads the checkpoints the cache holds)."""
    declared = {p.stem: declared_parameters([p]) for p in paths}
    return any(
        "extract" in names and (stem != TRAINING_NOTEBOOK or study_file) for stem, names in declared.items()
    )


def synthetic_notebooks(
    paths: Sequence[Path], *, chosen: bool, say: Callable[[str], None] | None = None
) -> list[Path]:
    """The notebooks of `paths` with a synthetic mode (they declare `synthetic`): a report on made-up
    models leaves the others out (05 only extracts and reads real runs), saying so; one the user
    chose by name (`chosen`) is a one-line error instead."""
    without = [p.stem for p in paths if "synthetic" not in declared_parameters([p])]
    if without and chosen:
        raise InvalidArgumentError(
            f"notebook {', '.join(without)} has no synthetic mode (it reads real runs): "
            "leave it out of --notebook, or drop synthetic"
        )
    if without and say is not None:
        say(f"synthetic: {', '.join(without)} left out (no synthetic mode: it reads real runs)")
    return [p for p in paths if p.stem not in without]


def cached_checkpoints(
    families: Iterable[str],
    corpora: Sequence[str],
    cache_dir: str | Path | None = None,
) -> dict | None:
    """A study table naming the training checkpoints of `families` that the cache holds on every
    one of `corpora` (what `rbplab demo` scores, or `rbplab run` with revisions): the revisions
    every model has at one scoring cap, the cap that covers the most checkpoints. None when the
    cache holds no checkpoint of every model on every corpus. Corpus names are resolved as
    everywhere (`rbplab.catalog.corpora.corpus_name`: any case; an unknown one is an error, not
    "no checkpoints")."""
    from rbplab.catalog import registry
    from rbplab.catalog.corpora import corpus_name
    from rbplab.store.cache.admin import list_entries

    corpora = [str(corpus_name(c)) for c in corpora]
    families = list(families)
    members = pd.concat([registry.family_models(f) for f in families], ignore_index=True)["model"]
    entries = list_entries(cache_dir)
    entries = entries[
        entries["complete"] & entries["model"].isin(list(members)) & entries["corpus"].isin(list(corpora))
    ].copy()
    # A final checkpoint is cached under the model itself (no revision): name it as its schedule does.
    finals = {}
    for model in members:
        schedule = registry.schedule_of(model)
        if schedule is not None:
            finals[model] = (schedule.final_step, schedule.revision(schedule.final_step))
    for i, row in entries[entries["revision"].isna() & entries["step"].notna()].iterrows():
        final = finals.get(row["model"])
        if final is not None and int(row["step"]) == final[0]:
            entries.loc[i, "revision"] = final[1]
    entries = entries[entries["revision"].notna()]
    if entries.empty:
        return None
    best: tuple[int, dict] | None = None
    cap = entries["max_tokens"].astype("object").where(entries["max_tokens"].notna(), None)
    for value, group in entries.assign(cap=cap).groupby("cap", dropna=False):
        present = group.groupby("revision").apply(
            lambda g: set(zip(g["model"], g["corpus"], strict=True)), include_groups=False
        )
        needed = {(m, c) for m in members for c in corpora}
        revisions = sorted((r for r, pairs in present.items() if needed <= pairs), key=_step_order)
        if len(revisions) < 2:
            continue
        table = {
            "families": families,
            "corpora": list(corpora),
            "revisions": revisions,
            "settings": {} if pd.isna(value) else {"max_tokens": int(value)},
        }
        if best is None or len(revisions) > best[0]:
            best = (len(revisions), table)
    return None if best is None else best[1]


def _step_order(revision: str) -> tuple:
    digits = "".join(ch if ch.isdigit() else " " for ch in revision).split()
    return (int(digits[-1]) if digits else -1, revision)
