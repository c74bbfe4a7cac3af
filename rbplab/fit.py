"""Power-law scaling fits of a loss against model size S, with their uncertainty.

The paper's fit (section 4): ordinary least squares of log(loss) on log S within a family,
loss = -log RBP_k (or CE, the same machinery), i.e. loss = A * S^-alpha with alpha > 0 when
the loss falls with size. Uncertainty comes from two sources that OLS standard errors alone
miss: the finite evaluation corpus (document bootstrap, `bootstrap_fits`, resampling the same
documents for every model of a corpus so their errors stay paired) and the choice of models
(leave-one-model-out refits). `extrapolation_check` asks what a scaling law is for: fit the
smaller models, predict the largest.

Tables are the long format of `rbplab.metrics.metrics_table`: one row per (family, model,
corpus, metric, k) with a positive `loss` column. Groups default to the columns of
DEFAULT_BY present in the table; each group must hold one row per model (rows repeated with
identical values, e.g. CE repeated over k, are collapsed).
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from rbplab.metrics import RunsLike, as_ks, as_runs, doc_stats, replicate_arrays, standard_ks

DEFAULT_BY = ("family", "corpus", "ties", "metric", "k")
_VALUE_IS_EXP_NEG_LOSS = ("rbp", "mean_p")


@dataclass(frozen=True)
class PowerLawFit:
    """loss = prefactor * S^-alpha, fitted by OLS in log-log space.

    alpha_se and the CI use the t-distribution with n-2 degrees of freedom (NaN when n = 2)."""

    alpha: float
    prefactor: float
    r2: float
    alpha_se: float
    alpha_ci_low: float
    alpha_ci_high: float
    residual_sd: float  # of log(loss)
    n: int
    level: float
    log_s_mean: float
    log_s_sxx: float

    def predict(self, S: float | np.ndarray) -> float | np.ndarray:
        return self.prefactor * np.asarray(S, dtype=np.float64) ** -self.alpha

    def prediction_interval(self, S: float | np.ndarray, level: float | None = None) -> tuple:
        """Interval for a new model's loss at size S (log-normal residuals, t quantiles)."""
        level = self.level if level is None else level
        x = np.log(np.asarray(S, dtype=np.float64))
        se = self.residual_sd * np.sqrt(1 + 1 / self.n + (x - self.log_s_mean) ** 2 / self.log_s_sxx)
        half = _t_quantile(level, self.n - 2) * se
        centre = np.log(self.predict(S))
        return np.exp(centre - half), np.exp(centre + half)


def _t_quantile(level: float, df: int) -> float:
    return float(sps.t.ppf((1 + level) / 2, df)) if df > 0 else float("nan")


def _ols(x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Column-wise OLS of z (n, m) on x (n,): slope, intercept, rss, tss per column, and Sxx."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    zc = z - z.mean(axis=0)
    slope = (xc @ zc) / sxx
    intercept = z.mean(axis=0) - slope * x.mean()
    rss = np.sum((zc - np.outer(xc, slope)) ** 2, axis=0)
    return slope, intercept, rss, np.sum(zc**2, axis=0), sxx


def _r2(rss: np.ndarray, tss: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tss > 0, 1 - rss / tss, np.nan)


def _validate(S: np.ndarray, y: np.ndarray) -> str | None:
    if len(S) != len(y):
        return f"S and loss differ in length ({len(S)} vs {len(y)})"
    if len(np.unique(S)) < 2:
        return "need at least two distinct model sizes"
    if np.any(~np.isfinite(S)) or np.any(S <= 0):
        return "model sizes S must be positive and finite"
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        return "loss must be positive and finite for every model (e.g. RBP_k = 1 or 0 gives 0 or inf)"
    return None


def fit_power_law(S: Sequence[float], y: Sequence[float], level: float = 0.95) -> PowerLawFit:
    """OLS of log y on log S: y = prefactor * S^-alpha. Raises ValueError on unusable input."""
    S, y = np.asarray(S, dtype=np.float64), np.asarray(y, dtype=np.float64)
    problem = _validate(S, y)
    if problem:
        raise ValueError(problem)
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    x = np.log(S)
    slope, intercept, rss, tss, sxx = _ols(x, np.log(y)[:, None])
    n = len(S)
    df = n - 2
    resid_sd = float(np.sqrt(rss[0] / df)) if df > 0 else float("nan")
    se = float(resid_sd / np.sqrt(sxx))
    half = _t_quantile(level, df) * se
    alpha = float(-slope[0])
    return PowerLawFit(
        alpha=alpha,
        prefactor=float(np.exp(intercept[0])),
        r2=float(_r2(rss, tss)[0]) if df > 0 else 1.0,
        alpha_se=se,
        alpha_ci_low=alpha - half,
        alpha_ci_high=alpha + half,
        residual_sd=resid_sd,
        n=n,
        level=level,
        log_s_mean=float(x.mean()),
        log_s_sxx=sxx,
    )


def _by(table: pd.DataFrame, by: Iterable[str] | None, exclude: Sequence[str] = ()) -> list[str]:
    if by is None:
        return [c for c in DEFAULT_BY if c in table.columns and c not in exclude]
    by = list(by)
    missing = [c for c in by if c not in table.columns]
    if missing:
        raise ValueError(f"grouping columns {missing} not in table (columns: {list(table.columns)})")
    return by


def _groups(table: pd.DataFrame, y: str, by: list[str]):
    """Yield (key dict, group frame with one row per model sorted by S)."""
    for col in ("S", y):
        if col not in table.columns:
            raise ValueError(f"table needs columns 'S' and {y!r}; it has {list(table.columns)}")
    model = "model" if "model" in table.columns else None
    grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        if model:
            frame = frame.drop_duplicates([model, "S", y])
            if frame[model].duplicated().any():
                dup = frame.loc[frame[model].duplicated(), model].iloc[0]
                raise ValueError(
                    f"group {dict(zip(by, key, strict=True))}: several {y} values for model {dup!r}"
                )
        yield dict(zip(by, key, strict=True)), frame.sort_values("S", kind="stable")


def _loo_alphas(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    """alpha refitted with each model left out (NaN where fewer than two sizes remain)."""
    n = len(S)
    keep = ~np.eye(n, dtype=bool)
    x = np.log(S)[np.where(keep)[1].reshape(n, n - 1)]  # row i: all but model i
    z = np.log(y)[np.where(keep)[1].reshape(n, n - 1)]
    xc = x - x.mean(axis=1, keepdims=True)
    sxx = np.sum(xc**2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sxx > 0, -np.sum(xc * z, axis=1) / sxx, np.nan)


def scaling_fits(
    table: pd.DataFrame, y: str = "loss", by: Iterable[str] | None = None, level: float = 0.95
) -> pd.DataFrame:
    """One power-law fit per group: alpha, prefactor, r2, alpha_se, alpha_ci_low/high (t),
    residual_sd, leave-one-model-out range (alpha_loo_min/max) and jackknife SE, n_models,
    S_min, S_max, note (why a fit is missing)."""
    by = _by(table, by)
    rows = []
    for key, frame in _groups(table, y, by):
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        row = {**key, "n_models": len(S), "S_min": S.min(), "S_max": S.max(), "note": _validate(S, v)}
        if row["note"] is None:
            fit = fit_power_law(S, v, level)
            row.update({f: getattr(fit, f) for f in ("alpha", "prefactor", "r2", "alpha_se")})
            row.update(
                alpha_ci_low=fit.alpha_ci_low, alpha_ci_high=fit.alpha_ci_high, residual_sd=fit.residual_sd
            )
            if len(S) >= 3:
                loo = _loo_alphas(S, v)
                n = np.sum(np.isfinite(loo))
                row.update(
                    alpha_loo_min=np.nanmin(loo),
                    alpha_loo_max=np.nanmax(loo),
                    alpha_jackknife_se=float(np.sqrt((n - 1) / n * np.nansum((loo - np.nanmean(loo)) ** 2))),
                )
        rows.append(row)
    cols = ["alpha", "prefactor", "r2", "alpha_se", "alpha_ci_low", "alpha_ci_high", "residual_sd"]
    cols += ["alpha_loo_min", "alpha_loo_max", "alpha_jackknife_se", "n_models", "S_min", "S_max", "note"]
    return pd.DataFrame(rows).reindex(columns=by + cols)


def leave_one_out(table: pd.DataFrame, y: str = "loss", by: Iterable[str] | None = None) -> pd.DataFrame:
    """Refit with each model left out: one row per (group, dropped model) with alpha, prefactor,
    r2 of the refit, alpha_full and delta_alpha = alpha - alpha_full. Groups with fewer than
    three usable models are skipped (`scaling_fits` notes why)."""
    by = _by(table, by)
    rows = []
    for key, frame in _groups(table, y, by):
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        if len(S) < 3 or _validate(S, v):
            continue
        full = fit_power_law(S, v).alpha
        names = frame["model"].to_numpy() if "model" in frame else np.arange(len(S))
        for i in range(len(S)):
            keep = np.arange(len(S)) != i
            if _validate(S[keep], v[keep]):
                continue
            fit = fit_power_law(S[keep], v[keep])
            rows.append(
                {**key, "dropped_model": names[i], "dropped_S": S[i], "alpha": fit.alpha}
                | {
                    "prefactor": fit.prefactor,
                    "r2": fit.r2,
                    "alpha_full": full,
                    "delta_alpha": fit.alpha - full,
                }
            )
    cols = ["dropped_model", "dropped_S", "alpha", "prefactor", "r2", "alpha_full", "delta_alpha"]
    return pd.DataFrame(rows).reindex(columns=by + cols)


def extrapolation_check(
    table: pd.DataFrame,
    n_holdout: int = 1,
    y: str = "loss",
    by: Iterable[str] | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Fit on all but the `n_holdout` largest models of each group and predict them.

    One row per held-out model: loss_observed, loss_predicted with a prediction interval
    (loss_pred_low/high, needs >= 3 fitted models), inside_interval, loss_log_error =
    log(predicted/observed), and the same on the metric's own scale (value_* ; RBP_k =
    exp(-loss) for rbp, loss itself for CE) with value_error = predicted - observed. Groups
    with fewer than two usable models left to fit are skipped."""
    if n_holdout < 1:
        raise ValueError(f"n_holdout must be >= 1, got {n_holdout}")
    by = _by(table, by)
    rows = []
    for key, frame in _groups(table, y, by):
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        fit_part = slice(0, len(S) - n_holdout)
        if len(S) - n_holdout < 2 or _validate(S[fit_part], v[fit_part]):
            continue
        fit = fit_power_law(S[fit_part], v[fit_part], level)
        metric = frame["metric"].iloc[0] if "metric" in frame else None
        to_value = np.exp if (y == "loss" and metric in _VALUE_IS_EXP_NEG_LOSS) else None
        names = frame["model"].to_numpy() if "model" in frame else np.arange(len(S))
        for i in range(len(S) - n_holdout, len(S)):
            pred = float(fit.predict(S[i]))
            low, high = (float(b) for b in fit.prediction_interval(S[i]))
            val_obs = float(np.exp(-v[i])) if to_value else float(v[i])
            val_pred = float(np.exp(-pred)) if to_value else pred
            rows.append(
                {**key, "model": names[i], "S": S[i], "n_fit": fit.n, "alpha_fit": fit.alpha}
                | {
                    "loss_observed": v[i],
                    "loss_predicted": pred,
                    "loss_pred_low": low,
                    "loss_pred_high": high,
                }
                | {"inside_interval": bool(low <= v[i] <= high) if np.isfinite(low) else pd.NA}
                | {"loss_log_error": float(np.log(pred / v[i])) if v[i] > 0 else np.nan}
                | {"value_observed": val_obs, "value_predicted": val_pred, "value_error": val_pred - val_obs}
            )
    cols = ["model", "S", "n_fit", "alpha_fit", "loss_observed", "loss_predicted", "loss_pred_low"]
    cols += ["loss_pred_high", "inside_interval", "loss_log_error", "value_observed", "value_predicted"]
    return pd.DataFrame(rows).reindex(columns=[c for c in by if c != "model"] + cols + ["value_error"])


def pooled_fits(
    table: pd.DataFrame,
    y: str = "loss",
    by: Iterable[str] | None = None,
    group: str = "family",
    level: float = 0.95,
) -> pd.DataFrame:
    """Shared slope with one intercept per `group` (family), and an F-test of the shared slope
    against separate slopes: F = [(RSS_shared - RSS_separate)/(G-1)] / [RSS_separate/(n-2G)].

    One row per (by-group, family): alpha (shared), alpha_se, alpha_ci_low/high, prefactor of
    that family, alpha_separate (the family's own fit), r2 (total) and r2_within (after family
    means), f_stat, df_num, df_den, p_value (the test is across models, so its p-value is
    meaningful, unlike token-level tests), n_families, n_models. Groups need >= 2 families with
    >= 2 distinct sizes each and positive finite losses; others are skipped."""
    by = _by(table, by, exclude=(group,))
    if group not in table.columns:
        raise ValueError(f"pooled_fits needs a {group!r} column")
    rows = []
    for key, frame in _pooled_groups(table, y, by, group):
        fams = frame[group].to_numpy()
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        labels, idx = np.unique(fams, return_inverse=True)
        counts = np.bincount(idx)
        if len(labels) < 2 or np.any(counts < 2) or _validate(S, v):
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
        half = _t_quantile(level, df_shared) * se
        if df_den > 0 and rss_sep > 0:
            f_stat = (rss_shared - rss_sep) / df_num / (rss_sep / df_den)
            p_value = float(sps.f.sf(f_stat, df_num, df_den))
        else:
            f_stat = p_value = np.nan
        tss = float(np.sum((z - z.mean()) ** 2))
        for j, fam in enumerate(labels):
            rows.append(
                {**key, group: fam, "alpha": -slope, "alpha_se": se}
                | {"alpha_ci_low": -slope - half, "alpha_ci_high": -slope + half}
                | {"prefactor": float(np.exp(zm[j] - slope * xm[j])), "alpha_separate": -sep_slopes[j]}
                | {"r2": 1 - rss_shared / tss if tss > 0 else np.nan, "r2_within": 1 - rss_shared / (zc @ zc)}
                | {"f_stat": f_stat, "df_num": df_num, "df_den": df_den, "p_value": p_value}
                | {"n_families": g, "n_models": n}
            )
    cols = ["alpha", "alpha_se", "alpha_ci_low", "alpha_ci_high", "prefactor", "alpha_separate", "r2"]
    cols += ["r2_within", "f_stat", "df_num", "df_den", "p_value", "n_families", "n_models"]
    return pd.DataFrame(rows).reindex(columns=by + [group] + cols)


def _pooled_groups(table: pd.DataFrame, y: str, by: list[str], group: str):
    """Like `_groups` but models are unique per (group, model) within a pooled group."""
    grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        ident = [group, "model"] if "model" in frame else [group]
        frame = frame.drop_duplicates(ident + ["S", y])
        if "model" in frame and frame.duplicated(ident).any():
            raise ValueError(f"group {dict(zip(by, key, strict=True))}: several {y} values for one model")
        yield dict(zip(by, key, strict=True)), frame


@dataclass(frozen=True)
class OffsetFit:
    """loss = E + A * S^-alpha with E, A >= 0, least squares on the loss scale."""

    E: float
    A: float
    alpha: float
    rss: float
    r2: float
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
    problem = _validate(S, y)
    if problem:
        raise ValueError(problem)
    if len(S) < 3:
        raise ValueError("the offset form has three parameters: need at least three models")
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
    return OffsetFit(
        e,
        a_raw,
        float(alpha),
        rss,
        1 - rss / tss if tss > 0 else np.nan,
        len(S),
        bool(i in (0, len(grid) - 1)),
    )


def offset_fits(
    table: pd.DataFrame,
    y: str = "loss",
    by: Iterable[str] | None = None,
    alphas: Sequence[float] | None = None,
) -> pd.DataFrame:
    """`fit_offset_power_law` per group: E, A, alpha, rss, r2, n_models, alpha_at_grid_edge, note."""
    by = _by(table, by)
    rows = []
    for key, frame in _groups(table, y, by):
        S, v = frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        row = {
            **key,
            "n_models": len(S),
            "note": _validate(S, v) or (None if len(S) >= 3 else "need >= 3 models"),
        }
        if row["note"] is None:
            fit = fit_offset_power_law(S, v, alphas)
            row.update(
                E=fit.E,
                A=fit.A,
                alpha=fit.alpha,
                rss=fit.rss,
                r2=fit.r2,
                alpha_at_grid_edge=fit.alpha_at_grid_edge,
            )
        rows.append(row)
    cols = ["E", "A", "alpha", "rss", "r2", "alpha_at_grid_edge", "n_models", "note"]
    return pd.DataFrame(rows).reindex(columns=by + cols)


def _fit_many(S: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """alpha and R^2 of log(loss) on log S for every replicate and threshold: loss (n_models,
    B, m) -> two (B, m) arrays, NaN where some loss is not positive and finite."""
    n, b, m = loss.shape
    valid = np.all(np.isfinite(loss) & (loss > 0), axis=0).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(np.where(np.isfinite(loss) & (loss > 0), loss, 1.0)).reshape(n, b * m)
    slope, _, rss, tss, _ = _ols(np.log(S), z)
    alpha = np.where(valid, -slope, np.nan).reshape(b, m)
    return alpha, np.where(valid, _r2(rss, tss), np.nan).reshape(b, m)


def _losses(reps: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack per-model replicate metrics into losses (n_models, B, m) per metric."""
    with np.errstate(divide="ignore"):
        return {
            "rbp": -np.log(np.stack([r["rbp"] for r in reps])),
            "ce": np.stack([r["ce"] for r in reps])[..., None],
            "mean_p": -np.log(np.stack([r["mean_p"] for r in reps]))[..., None],
        }


def bootstrap_fits(
    runs: RunsLike,
    ks: Iterable[int] | None = None,
    ties: str = "pessimistic",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    share_documents: bool = True,
) -> pd.DataFrame:
    """Document-bootstrap uncertainty of alpha and R^2 for every (family, corpus, metric, k).

    Each replicate resamples the corpus's documents once and re-evaluates every model of that
    corpus on that same resample (models saw the same documents, so their errors are paired;
    `share_documents=False` resamples independently per model, for comparison). Documents are
    identified by TokenStats.doc, which must index the same documents in every run of a corpus.
    ks default to `standard_ks` of the smallest vocabulary in the family; given ks above that
    vocabulary are dropped for that family.

    Columns: family, corpus, ties, metric, k, n_models, alpha, r2 (full-data fit),
    alpha_boot_se, alpha_boot_low/high (percentile), r2_boot_median, r2_boot_low/high,
    n_boot, n_boot_valid (replicates where every model's loss was positive and finite)."""
    runs = as_runs(runs)
    if n_boot < 2:
        raise ValueError(f"n_boot must be >= 2, got {n_boot}")
    ks_all = None if ks is None else as_ks(ks, np.iinfo(np.int64).max)
    fam_ks = {}
    for fam in {r.family for r in runs}:
        v_min = min(r.stats.vocab_size for r in runs if r.family == fam)
        fam_ks[fam] = standard_ks(v_min) if ks_all is None else ks_all[ks_all <= v_min]
        if not len(fam_ks[fam]):
            raise ValueError(f"no k in {list(ks_all)} fits family {fam!r} (smallest vocabulary {v_min})")
    q = [(1 - level) / 2, 0.5, (1 + level) / 2]
    rows = []
    for corpus in sorted({r.corpus for r in runs}):
        c_runs = [r for r in runs if r.corpus == corpus]
        n_docs = max(r.stats.n_docs for r in c_runs)
        docs = [doc_stats(r.stats, fam_ks[r.family], ties, n_docs) for r in c_runs]
        seq = np.random.SeedSequence([seed, zlib.crc32(corpus.encode())])
        if share_documents:
            reps = replicate_arrays(docs, n_boot, seq)
        else:
            children = seq.spawn(len(docs))
            reps = [replicate_arrays([d], n_boot, c)[0] for d, c in zip(docs, children, strict=True)]
        for fam in sorted({r.family for r in c_runs}):
            idx = [i for i, r in enumerate(c_runs) if r.family == fam]
            S = np.array([c_runs[i].S for i in idx])
            if len(np.unique(S)) < 2:
                continue
            boot = _losses([reps[i] for i in idx])
            point = _losses([docs[i].evaluate(np.ones(n_docs)) for i in idx])
            for metric, loss in boot.items():
                alpha, r2 = _fit_many(S, loss)
                alpha0, r20 = _fit_many(S, point[metric])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns -> NaN summaries
                    a_q, r_q = np.nanquantile(alpha, q, axis=0), np.nanquantile(r2, q, axis=0)
                    a_se = np.nanstd(alpha, axis=0, ddof=1)
                k_values = list(fam_ks[fam]) if metric == "rbp" else [None]
                for j, k in enumerate(k_values):
                    rows.append(
                        {"family": fam, "corpus": corpus, "ties": ties, "metric": metric, "k": k}
                        | {"n_models": len(idx), "alpha": alpha0[0, j], "r2": r20[0, j]}
                        | {
                            "alpha_boot_se": a_se[j],
                            "alpha_boot_low": a_q[0, j],
                            "alpha_boot_high": a_q[2, j],
                        }
                        | {"r2_boot_median": r_q[1, j], "r2_boot_low": r_q[0, j], "r2_boot_high": r_q[2, j]}
                        | {"n_boot": n_boot, "n_boot_valid": int(np.sum(np.isfinite(alpha[:, j])))}
                    )
    out = pd.DataFrame(rows)
    if len(out):
        out["k"] = pd.array(out["k"], dtype="Int64")
    return out
