"""Plotly figure builders for the paper's figures, one module per question: `size` (−log RBP_k
against S, Figures 3-5, held-out predictions, the paper's own numbers), `ksweep` (the law as a
function of k, Figure 6), `emergence` (Figure 7), `distribution` (the rank distribution and its
lognormal theory, Figure 8), `training` (checkpoints: loss against tokens seen, the joint law) and
`decomposition` (CE = EE + SA − Conf); `traces` holds what they share.

Every builder is a pure function of tidy DataFrames (the ones the `rbplab.study` modules produce):
it only reshapes and draws, never computes statistics, so the same builder serves the
static report, paper exports (`rbplab.viz.export.save`) and the interactive widgets (which copy a
freshly built figure's traces into a live FigureWidget). Every figure gets the page geometry of
`rbplab.viz.layout`: 960 px wide, titles that do not collide, legends below the panels that name
each fitted line's panel with its exponent and interval, and sizes on a sequential colour scale.
Text uses plotly's HTML (<sub>, <sup>), never raw TeX.

Column conventions (extra columns are ignored):
  points : family, corpus, model, S, k, rbp, neg_log_rbp [, neg_log_rbp_low, neg_log_rbp_high]
  fits   : family, corpus, k, alpha, r2 [, alpha_low, alpha_high]
  bands  : family, corpus, k, S, fit, fit_low, fit_high (on the -log RBP_k scale)
  ksweep : family, corpus, k, alpha, r2 [, alpha_low, alpha_high]

Traces carry a `meta` tag saying what they are ("models", "fit", "band", "empirical",
"independence", "law", "extrapolation", "marker", "key", ...), which tests and views select by.
"""

from rbplab.viz.plots.decomposition import decomposition_bars, decomposition_vs_size
from rbplab.viz.plots.distribution import ce_vs_rbp, lognormal_params, rank_distribution
from rbplab.viz.plots.emergence import emergence, emergence_linearised
from rbplab.viz.plots.ksweep import ksweep, rbp_curves
from rbplab.viz.plots.size import prediction_audit, rbp_vs_size, reference_vs_size
from rbplab.viz.plots.training import iso_loss, training_dynamics

__all__ = [
    "ce_vs_rbp",
    "decomposition_bars",
    "decomposition_vs_size",
    "emergence",
    "emergence_linearised",
    "iso_loss",
    "ksweep",
    "lognormal_params",
    "prediction_audit",
    "rank_distribution",
    "rbp_curves",
    "rbp_vs_size",
    "reference_vs_size",
    "training_dynamics",
]
