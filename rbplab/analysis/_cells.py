"""Rank cells of a discretised log-rank distribution, shared by the fits and the theory (package-private).

Rank r occupies the cell [r - 1/2, r + 1/2] of the continuous rank, so its probability is a
difference of CDF values at the cell's log-edges.
"""

from __future__ import annotations

import numpy as np

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum's own loop, not BLAS: multithreaded BLAS ddot is slow on busy machines, and these
    # vectors (<= |V|) are too short for threads to pay off.
    return float(np.einsum("i,i->", a, b))


def log_cell(a: np.ndarray, b: np.ndarray, logcdf) -> np.ndarray:
    """log(F(b) - F(a)) for a < b without cancellation: in the upper tail use survival
    functions (F symmetric, so S(t) = F(-t))."""
    upper = a > 0
    hi = np.where(upper, logcdf(-a), logcdf(b))
    lo = np.where(upper, logcdf(-b), logcdf(a))
    with np.errstate(divide="ignore"):
        return hi + np.log(-np.expm1(lo - hi))


def cell_edges(ranks: np.ndarray, mu: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    r = ranks.astype(np.float64)
    return (np.log(r - 0.5) - mu) / sigma, (np.log(r + 0.5) - mu) / sigma
