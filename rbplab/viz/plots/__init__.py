"""Plotly figure builders for the paper's figures (being split by question: this commit only moves
the module into the package)."""

from rbplab.viz.plots.size import (
    ce_vs_rbp,
    decomposition_bars,
    decomposition_vs_size,
    emergence,
    emergence_linearised,
    iso_loss,
    ksweep,
    law_range,
    lognormal_params,
    prediction_audit,
    rank_distribution,
    rbp_curves,
    rbp_vs_size,
    reference_vs_size,
    si,
    training_dynamics,
)

__all__ = [
    "ce_vs_rbp",
    "decomposition_bars",
    "decomposition_vs_size",
    "emergence",
    "emergence_linearised",
    "iso_loss",
    "ksweep",
    "law_range",
    "lognormal_params",
    "prediction_audit",
    "rank_distribution",
    "rbp_curves",
    "rbp_vs_size",
    "reference_vs_size",
    "si",
    "training_dynamics",
]
