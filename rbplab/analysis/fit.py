"""Power-law scaling fits of a loss against model size S, with their uncertainty.

The paper's fit (section 4): ordinary least squares of log(loss) on log S within a family,
loss = -log RBP_k (or CE, the same machinery), i.e. loss = A * S^-alpha with alpha > 0 when
the loss falls with size. Uncertainty comes from two sources that OLS standard errors alone
miss: the finite evaluation corpus (document bootstrap, `bootstrap_fits`, resampling the same
documents for every model of a corpus so their errors stay paired) and the choice of models
(leave-one-model-out refits). `extrapolation_check` asks what a scaling law is for: fit the
smaller models, predict the largest.

Tables are the long format of `rbplab.analysis.metrics.metrics_table`: one row per (family, model,
corpus, metric, k) with a positive `loss` column. Groups default to the columns of
DEFAULT_BY present in the table; each group must hold one row per model (rows repeated with
identical values, e.g. CE repeated over k, are collapsed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

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
