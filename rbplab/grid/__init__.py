"""What a study runs: models (each resolved once), revisions, corpora and extraction settings.

`Grid` is the one expansion of families, models, revisions and corpora that `rbplab extract`,
study files, the runner and `load_study` share; each member is a `rbplab.catalog.ResolvedModel`,
resolved from its name once.
"""

from rbplab.grid.grid import Grid, GridRun, StudyFileError, corpus_label, parse_study, read_study_file

__all__ = ["Grid", "GridRun", "StudyFileError", "corpus_label", "parse_study", "read_study_file"]
