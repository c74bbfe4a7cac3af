"""A study: the runs of some model families on some corpora, ready for tables and figures.

`Study` holds runs and their precomputed RBP curves (no I/O); `load_study` fills one from the
cache; `synthetic_study` makes one of made-up models, to try every view without a model.
"""

from rbplab.study.loading import (
    MissingRunsError,
    default_corpora,
    load_entries,
    load_study,
    open_study,
)
from rbplab.study.study import Study
from rbplab.study.synthetic import synthetic_study

__all__ = [
    "MissingRunsError",
    "Study",
    "default_corpora",
    "load_entries",
    "load_study",
    "open_study",
    "synthetic_study",
]
