"""Statistics of cached ranks: RBP_k, fits against S, k-sweeps, emergence, rank distributions.

Pure numpy/scipy/pandas on `rbplab.core` types: no torch, no plotting, no file access.
"""

from rbplab.analysis.emergence import sequence_fits, sequence_table
from rbplab.analysis.fit import PowerLawFit, bootstrap_fits, extrapolation_check, fit_power_law, scaling_fits
from rbplab.analysis.ksweep import k_sweep
from rbplab.analysis.lognormal import fit_lognormal
from rbplab.analysis.metrics import RBPCurve, metrics_table, rbp, rbp_curve

__all__ = [
    "PowerLawFit",
    "RBPCurve",
    "bootstrap_fits",
    "extrapolation_check",
    "fit_lognormal",
    "fit_power_law",
    "k_sweep",
    "metrics_table",
    "rbp",
    "rbp_curve",
    "scaling_fits",
    "sequence_fits",
    "sequence_table",
]
