"""What a report analyses: its request, one `rbplab.grid.Grid`, handed to every notebook as the
parameters their `parameters` cells declare (a study file's path, else families, models, corpora
and settings), and checked before any notebook runs, so that an unknown name, a corpus that cannot
be opened or a run missing from the cache is one error rather than a failed notebook each.

The index page and the results file state this grid, so "corpora: null" (the notebooks' own
default) never stands in for the corpora that were analysed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

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
