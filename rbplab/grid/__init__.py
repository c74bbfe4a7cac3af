"""What a study runs: models (each resolved once), revisions, corpora and extraction settings.

`Grid` is the one expansion of families, models, revisions and corpora that `rbplab extract`,
study files, the runner and `load_study` share; each member is a `rbplab.catalog.ResolvedModel`,
resolved from its name once. Build one with `Grid.from_names` or read a study file with
`Grid.read`.
"""

from rbplab.grid.grid import Grid, StudyFileError

__all__ = ["Grid", "StudyFileError"]
