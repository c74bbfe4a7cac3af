"""Study files, now `rbplab.grid` (kept for one release: import from `rbplab.grid` instead).

A study file is a grid in TOML; `rbplab.grid.Grid.read` reads it and `Grid.from_mapping` checks
its table. `StudyFile` is `Grid` and `StudyMember` is `ModelRef` under their former names.
"""

from __future__ import annotations

from rbplab.grid import Grid, ModelRef, StudyFileError, parse_study, read_study_file

StudyFile = Grid
StudyMember = ModelRef

__all__ = ["StudyFile", "StudyFileError", "StudyMember", "parse_study", "read_study_file"]
