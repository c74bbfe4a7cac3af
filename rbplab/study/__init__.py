"""A study: the runs of some model families on some corpora, ready for tables and figures.

`Study` (`study`) holds runs and their precomputed RBP curves (no I/O); `load_study` (`loading`)
fills one from the cache, finding a grid's entries through `lookup`; `synthetic_study`
(`synthetic`) makes one of made-up models, to try every view without a model.

The analyses are functions of a study, one module per question (as `rbplab.viz.plots` draws
them): `size` (the size law: `size.fits(study, ks)`, `bands`, `fit_table`, `ksweep`, `bootstrap`,
`extrapolation`), `emergence` (`emergence.table`, `emergence.fits`), `distribution` (the
lognormal theory), `decomposition` (CE = EE + SA - Conf, `metric_table`, `prediction_audit`) and
`training` (checkpoints: `training.table`, `training.joint_laws`) and `depth` (the law by layer:
`depth.depth_study`, `depth.depth_fits`, `depth.first_depth`). `tables` writes any table as
Markdown or LaTeX, `results` a study's results file.
"""

from rbplab.study import decomposition, depth, distribution, emergence, size, tables, training
from rbplab.study.loading import default_corpora, load_study
from rbplab.study.lookup import MissingRunsError
from rbplab.study.study import Study
from rbplab.study.synthetic import synthetic_study

# The question modules are the API too: the README, the docs and the notebooks call them.
__all__ = [
    "MissingRunsError",
    "Study",
    "decomposition",
    "default_corpora",
    "depth",
    "distribution",
    "emergence",
    "load_study",
    "size",
    "synthetic_study",
    "tables",
    "training",
]
