"""Least-squares helpers shared by the fits of this package (package-private).

Everything is a log-log regression of a loss on model size S, grouped by the tidy tables'
identifying columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from rbplab.core.columns import FIT_GROUP_COLUMNS
from rbplab.core.errors import InvalidArgumentError

DEFAULT_BY = FIT_GROUP_COLUMNS


def t_quantile(level: float, df: int) -> float:
    return float(sps.t.ppf((1 + level) / 2, df)) if df > 0 else float("nan")


def ols(x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Column-wise OLS of z (n, m) on x (n,): slope, intercept, rss, tss per column, and Sxx."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    zc = z - z.mean(axis=0)
    slope = (xc @ zc) / sxx
    intercept = z.mean(axis=0) - slope * x.mean()
    rss = np.sum((zc - np.outer(xc, slope)) ** 2, axis=0)
    return slope, intercept, rss, np.sum(zc**2, axis=0), sxx


def r_squared(rss: np.ndarray, tss: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tss > 0, 1 - rss / tss, np.nan)


def unusable_reason(S: np.ndarray, y: np.ndarray) -> str | None:
    if len(S) != len(y):
        return f"S and loss differ in length ({len(S)} vs {len(y)})"
    if len(np.unique(S)) < 2:
        return "need at least two distinct model sizes"
    if np.any(~np.isfinite(S)) or np.any(S <= 0):
        return "model sizes S must be positive and finite"
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        return "loss must be positive and finite for every model (e.g. RBP_k = 1 or 0 gives 0 or inf)"
    return None


def grouping_columns(table: pd.DataFrame, by: Iterable[str] | None, exclude: Sequence[str] = ()) -> list[str]:
    if by is None:
        return [c for c in DEFAULT_BY if c in table.columns and c not in exclude]
    by = list(by)
    missing = [c for c in by if c not in table.columns]
    if missing:
        raise InvalidArgumentError(
            f"grouping columns {missing} not in table (columns: {list(table.columns)})"
        )
    return by


def model_groups(table: pd.DataFrame, y: str, by: list[str]):
    """Yield (key dict, group frame with one row per model sorted by S)."""
    for col in ("S", y):
        if col not in table.columns:
            raise InvalidArgumentError(f"table needs columns 'S' and {y!r}; it has {list(table.columns)}")
    model = "model" if "model" in table.columns else None
    grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        if model:
            frame = frame.drop_duplicates([model, "S", y])
            if frame[model].duplicated().any():
                dup = frame.loc[frame[model].duplicated(), model].iloc[0]
                raise InvalidArgumentError(
                    f"group {dict(zip(by, key, strict=True))}: several {y} values for model {dup!r}"
                )
        yield dict(zip(by, key, strict=True)), frame.sort_values("S", kind="stable")


def fit_many(S: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """alpha and R^2 of log(loss) on log S for every replicate and threshold: loss (n_models,
    B, m) -> two (B, m) arrays, NaN where some loss is not positive and finite."""
    n, b, m = loss.shape
    valid = np.all(np.isfinite(loss) & (loss > 0), axis=0).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(np.where(np.isfinite(loss) & (loss > 0), loss, 1.0)).reshape(n, b * m)
    slope, _, rss, tss, _ = ols(np.log(S), z)
    alpha = np.where(valid, -slope, np.nan).reshape(b, m)
    return alpha, np.where(valid, r_squared(rss, tss), np.nan).reshape(b, m)
