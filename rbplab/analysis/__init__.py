"""Statistics of cached ranks: RBP_k, fits against S (and D, C), k-sweeps, emergence, rank distributions.

Pure numpy/scipy/pandas on `rbplab.core` types: no torch, no plotting, no file access.
"""

from rbplab.analysis import data_scaling, decomposition, fit, ksweep, metrics
from rbplab.analysis.fit import PowerLawFit, fit_power_law, scaling_fits
from rbplab.analysis.metrics import metrics_table, rbp

# The modules the notebooks and the docs call (`fit.compare_fits`, `ksweep.sweep_summary`, ...).
__all__ = [
    "PowerLawFit",
    "fit_power_law",
    "metrics_table",
    "rbp",
    "scaling_fits",
    "data_scaling",
    "decomposition",
    "fit",
    "ksweep",
    "metrics",
]
