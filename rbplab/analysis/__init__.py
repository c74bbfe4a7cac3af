"""Statistics of cached ranks: RBP_k, fits against S (and D, C), k-sweeps, emergence, rank distributions.

Pure numpy/scipy/pandas on `rbplab.core` types: no torch, no plotting, no file access.
"""

from rbplab.analysis.data_scaling import (
    JointLawFit,
    compare_frontiers,
    data_fits,
    fit_joint_law,
    frontier,
    joint_fits,
)
from rbplab.analysis.decomposition import Decomposition, decompose, mean_reciprocal_rank
from rbplab.analysis.emergence import sequence_fits, sequence_table
from rbplab.analysis.fit import (
    PowerLawFit,
    audit_summary,
    bootstrap_fits,
    extrapolation_check,
    fit_power_law,
    prediction_audit,
    scaling_fits,
)
from rbplab.analysis.ksweep import k_sweep
from rbplab.analysis.lognormal import fit_lognormal
from rbplab.analysis.metrics import RBPCurve, metrics_table, rbp, rbp_curve

__all__ = [
    "Decomposition",
    "JointLawFit",
    "PowerLawFit",
    "RBPCurve",
    "audit_summary",
    "bootstrap_fits",
    "compare_frontiers",
    "data_fits",
    "decompose",
    "extrapolation_check",
    "fit_joint_law",
    "fit_lognormal",
    "fit_power_law",
    "frontier",
    "joint_fits",
    "k_sweep",
    "mean_reciprocal_rank",
    "metrics_table",
    "prediction_audit",
    "rbp",
    "rbp_curve",
    "scaling_fits",
    "sequence_fits",
    "sequence_table",
]
