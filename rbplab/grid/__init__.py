"""What a study runs: models (each resolved once), revisions, corpora and extraction settings.

`Grid` is the one expansion of families, models, revisions and corpora that `rbplab extract`,
study files, the runner and `load_study` share; `ModelRef` is a model resolved from its name once.
"""

from rbplab.grid.grid import Grid, GridRun, StudyFileError, corpus_label, parse_study, read_study_file
from rbplab.grid.models import ModelRef

__all__ = ["Grid", "GridRun", "ModelRef", "StudyFileError", "corpus_label", "parse_study", "read_study_file"]
