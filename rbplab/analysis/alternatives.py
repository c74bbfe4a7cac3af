"""Alternative scaling-law forms to the per-family power law of `rbplab.analysis.fit`.

`pooled_fits`: one slope shared by every family (one intercept each), with an F-test of the
shared slope against separate slopes. `offset_fits` / `fit_offset_power_law`: a power law
with an irreducible offset, loss = E + A * S^-alpha, fitted on the loss scale.

Comparing the offset form with the plain power law: the plain fit's R^2 is on the log-loss
scale with 2 parameters, so the offset fit reports r2_log (its predictions scored on the same
log-loss scale) and both adjusted for their parameter counts (r2_log_adj with 3, plain_r2_log_adj
with 2); r2_loss is its own least-squares criterion on the loss scale, not comparable.

Tables are the long format of `rbplab.analysis.metrics.metrics_table`, grouped as in `rbplab.analysis.fit`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from rbplab.analysis._regression import grouping_columns, model_groups, t_quantile, unusable_reason
from rbplab.analysis.fit import fit_power_law
from rbplab.core.errors import InvalidArgumentError


def pooled_fits(
    table: pd.DataFrame,
    y: str = "loss",
    by: Iterable[str] | None = None,
    group: str = "family",
    level: float = 0.95,
) -> pd.DataFrame:
    """Shared slope with one intercept per `group` (family), and an F-test of the shared slope
    against separate slopes: F = [(RSS_shared - RSS_separate)/(G-1)] / [RSS_separate/(n-2G)].

    One row per (by-group, family): alpha (shared), alpha_se, alpha_low/high, prefactor of
    that family, alpha_separate (the family's own fit), r2 (total) and r2_within (after family
    means), f_stat, df_num, df_den, p_value (the test is across models, so its p-value is
    meaningful, unlike token-level tests), n_families, n_models. Groups need >= 2 families with
    >= 2 distinct sizes each and positive finite losses; others are skipped."""
    by = grouping_columns(table, by, exclude=(group,))
    if group not in table.columns:
        raise InvalidArgumentError(f"pooled_fits needs a {group!r} column")
    rows = []
    for key, frame in _pooled_groups(table, y, by, group):
        fams = frame[group].to_numpy()
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        labels, idx = np.unique(fams, return_inverse=True)
        counts = np.bincount(idx)
        if len(labels) < 2 or np.any(counts < 2) or unusable_reason(S, v):
            continue
        x, z = np.log(S), np.log(v)
        g = len(labels)
        xm, zm = np.bincount(idx, x) / counts, np.bincount(idx, z) / counts
        xc, zc = x - xm[idx], z - zm[idx]
        sxx_f = np.bincount(idx, xc**2)
        if np.any(sxx_f <= 0):
            continue
        slope = float(xc @ zc / (xc @ xc))
        rss_shared = float(np.sum((zc - slope * xc) ** 2))
        sep_slopes = np.bincount(idx, xc * zc) / sxx_f
        rss_sep = float(np.sum((zc - sep_slopes[idx] * xc) ** 2))
        n = len(S)
        df_shared, df_num, df_den = n - g - 1, g - 1, n - 2 * g
        se = float(np.sqrt(rss_shared / df_shared / (xc @ xc))) if df_shared > 0 else np.nan
        half = t_quantile(level, df_shared) * se
        if df_den > 0 and rss_sep > 0:
            f_stat = (rss_shared - rss_sep) / df_num / (rss_sep / df_den)
            p_value = float(sps.f.sf(f_stat, df_num, df_den))
        else:
            f_stat = p_value = np.nan
        tss = float(np.sum((z - z.mean()) ** 2))
        for j, fam in enumerate(labels):
            rows.append(
                {**key, group: fam, "alpha": -slope, "alpha_se": se}
                | {"alpha_low": -slope - half, "alpha_high": -slope + half}
                | {"prefactor": float(np.exp(zm[j] - slope * xm[j])), "alpha_separate": -sep_slopes[j]}
                | {"r2": 1 - rss_shared / tss if tss > 0 else np.nan, "r2_within": 1 - rss_shared / (zc @ zc)}
                | {"f_stat": f_stat, "df_num": df_num, "df_den": df_den, "p_value": p_value}
                | {"n_families": g, "n_models": n}
            )
    cols = ["alpha", "alpha_se", "alpha_low", "alpha_high", "prefactor", "alpha_separate", "r2"]
    cols += ["r2_within", "f_stat", "df_num", "df_den", "p_value", "n_families", "n_models"]
    return pd.DataFrame(rows).reindex(columns=by + [group] + cols)


def _pooled_groups(table: pd.DataFrame, y: str, by: list[str], group: str):
    """Like `model_groups` but models are unique per (group, model) within a pooled group."""
    grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        ident = [group, "model"] if "model" in frame else [group]
        frame = frame.drop_duplicates(ident + ["S", y])
        if "model" in frame and frame.duplicated(ident).any():
            raise InvalidArgumentError(
                f"group {dict(zip(by, key, strict=True))}: several {y} values for one model"
            )
        yield dict(zip(by, key, strict=True)), frame


@dataclass(frozen=True)
class OffsetFit:
    """loss = E + A * S^-alpha with E, A >= 0, least squares on the loss scale.

    r2_loss: R^2 on the loss scale (the fit's own criterion); r2_log: R^2 of log(loss), the
    scale of the plain power law's R^2; r2_log_adj: r2_log adjusted for 3 parameters,
    1 - (1 - r2_log)(n - 1)/(n - 3) (NaN with 3 models)."""

    E: float
    A: float
    alpha: float
    rss: float
    r2_loss: float
    r2_log: float
    r2_log_adj: float
    n: int
    alpha_at_grid_edge: bool  # True: the optimum hit the alpha grid's boundary; widen it

    def predict(self, S: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.A * np.asarray(S, dtype=np.float64) ** -self.alpha


def _offset_linear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact non-negative least squares of y on [1, x] for every column of x (n, m).

    The optimum of a 2-parameter NNLS is the unconstrained fit if feasible, else the best fit
    on a face E = 0 or A = 0; evaluate all three and keep the best feasible one."""
    xm, ym = x.mean(axis=0), y.mean()
    sxx = np.sum((x - xm) ** 2, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        a_free = np.where(sxx > 0, ((x - xm) * (y - ym)[:, None]).sum(axis=0) / sxx, 0.0)
        cands = [
            (ym - a_free * xm, a_free),  # unconstrained
            (np.zeros_like(xm), np.maximum((x * y[:, None]).sum(axis=0) / (x**2).sum(axis=0), 0.0)),  # E = 0
            (np.full_like(xm, max(ym, 0.0)), np.zeros_like(xm)),  # A = 0
        ]
    best_rss = np.full(x.shape[1], np.inf)
    best_e, best_a = np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for e, a in cands:
        rss = np.sum((y[:, None] - e - a * x) ** 2, axis=0)
        ok = (e >= 0) & (a >= 0) & (rss < best_rss)
        best_rss, best_e, best_a = (
            np.where(ok, rss, best_rss),
            np.where(ok, e, best_e),
            np.where(ok, a, best_a),
        )
    return best_e, best_a, best_rss


def fit_offset_power_law(
    S: Sequence[float], y: Sequence[float], alphas: Sequence[float] | None = None
) -> OffsetFit:
    """loss = E + A S^-alpha: grid over alpha (default 2000 points in (0, 2]) with exact
    closed-form non-negative (E, A), then a bounded 1-D refinement between grid neighbours."""
    S, y = np.asarray(S, dtype=np.float64), np.asarray(y, dtype=np.float64)
    problem = unusable_reason(S, y)
    if problem:
        raise InvalidArgumentError(problem)
    if len(S) < 3:
        raise InvalidArgumentError("the offset form has three parameters: need at least three models")
    grid = np.linspace(1e-3, 2.0, 2000) if alphas is None else np.sort(np.asarray(alphas, dtype=np.float64))
    s = S / np.exp(np.log(S).mean())  # rescale so S^-alpha stays O(1) over the grid

    def rss_at(a: np.ndarray) -> np.ndarray:
        return _offset_linear(s[:, None] ** -np.atleast_1d(a)[None, :], y)[2]

    i = int(np.argmin(rss_at(grid)))
    alpha = grid[i]
    if 0 < i < len(grid) - 1:
        res = optimize.minimize_scalar(
            lambda a: rss_at(a)[0], bounds=(grid[i - 1], grid[i + 1]), method="bounded"
        )
        alpha = res.x if res.fun <= rss_at(alpha)[0] else alpha
    e, a, rss = (float(v[0]) for v in _offset_linear(s[:, None] ** -np.atleast_1d(alpha)[None, :], y))
    tss = float(np.sum((y - y.mean()) ** 2))
    a_raw = a * np.exp(np.log(S).mean()) ** alpha  # undo the rescaling of S
    r2_log = _r2_log(y, e + a_raw * S**-alpha)
    return OffsetFit(
        e,
        a_raw,
        float(alpha),
        rss,
        1 - rss / tss if tss > 0 else np.nan,
        r2_log,
        adjusted_r2(r2_log, len(S), 3),
        len(S),
        bool(i in (0, len(grid) - 1)),
    )


def _r2_log(y: np.ndarray, pred: np.ndarray) -> float:
    z = np.log(y)
    tss = float(np.sum((z - z.mean()) ** 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 - float(np.sum((z - np.log(pred)) ** 2)) / tss if tss > 0 else np.nan


def adjusted_r2(r2: float, n: int, n_params: int) -> float:
    """1 - (1 - R^2)(n - 1)/(n - p): R^2 penalised for p fitted parameters (NaN when n <= p)."""
    return 1 - (1 - r2) * (n - 1) / (n - n_params) if n > n_params else float("nan")


def offset_fits(
    table: pd.DataFrame,
    y: str = "loss",
    by: Iterable[str] | None = None,
    alphas: Sequence[float] | None = None,
) -> pd.DataFrame:
    """`fit_offset_power_law` per group: E, A, alpha, rss, r2_loss, r2_log, r2_log_adj,
    plain_r2_log_adj (the plain power law's log-scale R^2 adjusted for its 2 parameters, to
    compare with r2_log_adj), n_models, alpha_at_grid_edge, note (module docstring)."""
    by = grouping_columns(table, by)
    rows = []
    for key, frame in model_groups(table, y, by):
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        row = {
            **key,
            "n_models": len(S),
            "note": unusable_reason(S, v) or (None if len(S) >= 3 else "need >= 3 models"),
        }
        if row["note"] is None:
            fit = fit_offset_power_law(S, v, alphas)
            row.update(
                E=fit.E,
                A=fit.A,
                alpha=fit.alpha,
                rss=fit.rss,
                r2_loss=fit.r2_loss,
                r2_log=fit.r2_log,
                r2_log_adj=fit.r2_log_adj,
                plain_r2_log_adj=adjusted_r2(fit_power_law(S, v).r2, len(S), 2),
                alpha_at_grid_edge=fit.alpha_at_grid_edge,
            )
        rows.append(row)
    cols = ["E", "A", "alpha", "rss", "r2_loss", "r2_log", "r2_log_adj", "plain_r2_log_adj"]
    cols += ["alpha_at_grid_edge", "n_models", "note"]
    return pd.DataFrame(rows).reindex(columns=by + cols)
