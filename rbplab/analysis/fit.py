"""Power-law fits of -log RBP_k (or any metric) against S: least squares in log-log space, its
intervals and bands.

Least-squares helpers shared by the fits of this package (package-private).

Everything is a log-log regression of a loss on model size S, grouped by the tidy tables'
identifying columns.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from rbplab.analysis.metrics import as_ks, doc_stats, replicate_arrays, standard_ks
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import FIT_GROUP_COLUMNS, check_ties

DEFAULT_BY = FIT_GROUP_COLUMNS


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student-t quantile of `level` at `df` degrees of freedom (NaN without any).
    `scipy.special.stdtrit` is what `scipy.stats.t.ppf` computes, without importing scipy.stats
    (~0.7 s at the start of every notebook kernel and every command that fits)."""
    return float(special.stdtrit(df, (1 + level) / 2)) if df > 0 else float("nan")


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
    """Yield (key dict, S, y) per group: one value per model, sorted by S (ties as they came)."""
    for col in ("S", y):
        if col not in table.columns:
            raise InvalidArgumentError(f"table needs columns 'S' and {y!r}; it has {list(table.columns)}")
    model = "model" if "model" in table.columns else None
    if model:
        # Once for the whole table, not per group: a k-sweep of a large study fits tens of
        # thousands of groups. The group's columns are part of each row compared, so this is the
        # per-group deduplication.
        table = table.drop_duplicates([*by, model, "S", y])
        if table.duplicated([*by, model]).any():
            grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
            for key, frame in grouped:
                if frame[model].duplicated().any():
                    key = key if isinstance(key, tuple) else (key,)
                    dup = frame.loc[frame[model].duplicated(), model].iloc[0]
                    raise InvalidArgumentError(
                        f"group {dict(zip(by, key, strict=True))}: several {y} values for model {dup!r}"
                    )
    # A stable sort by S of the whole table keeps each group's rows in S order, ties as they came.
    table = table.sort_values("S", kind="stable")
    S, values = table["S"].to_numpy(np.float64), table[y].to_numpy(np.float64)
    if not by:
        yield {}, S, values
        return
    grouped = table.groupby(by, dropna=False, sort=True)
    if len(by) > 1 and not table[by].isna().to_numpy().any():
        # Positions of each group's rows, keyed and ordered as iteration gives them (sorted
        # keys), without building a frame per group: a k-sweep of a large study has tens of
        # thousands of groups.
        for key, rows in grouped.indices.items():
            yield dict(zip(by, key, strict=True)), S[rows], values[rows]
        return
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(by, key, strict=True)), frame["S"].to_numpy(np.float64), frame[y].to_numpy(np.float64)


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


_VALUE_IS_EXP_NEG_LOSS = ("rbp", "mean_p")
# Why R^2 and the alpha interval of a two-model fit are NaN (a line through two points fits
# them exactly whatever the law; R^2 = 1 there says nothing).
TWO_MODELS_NOTE = "2 models: no residual degrees of freedom, R^2 and the alpha interval are undefined"


def power_law(prefactor: float, exponent: float, x: float | np.ndarray) -> float | np.ndarray:
    """prefactor * x^-exponent: the one place a fitted power law is evaluated (in S or in D)."""
    return prefactor * np.asarray(x, dtype=np.float64) ** -exponent


@dataclass(frozen=True)
class PowerLawFit:
    """loss = prefactor * S^-alpha, fitted by OLS in log-log space.

    alpha_se and the CI use the t-distribution with n-2 degrees of freedom. With n = 2 models
    the line passes through both points: there are no residual degrees of freedom, so r2,
    alpha_se, the CI and residual_sd are NaN (not a perfect fit; see `TWO_MODELS_NOTE`)."""

    alpha: float
    prefactor: float
    r2: float
    alpha_se: float
    alpha_low: float
    alpha_high: float
    residual_sd: float  # of log(loss)
    n: int
    level: float
    log_s_mean: float
    log_s_sxx: float

    def predict(self, S: float | np.ndarray) -> float | np.ndarray:
        return power_law(self.prefactor, self.alpha, S)

    def confidence_interval(self, S: float | np.ndarray, level: float | None = None) -> tuple:
        """Interval for the law's line itself at size S (the OLS mean in log space, t quantiles);
        NaN with two models (no residual degrees of freedom)."""
        level = self.level if level is None else level
        x = np.log(np.asarray(S, dtype=np.float64))
        se = self.residual_sd * np.sqrt(1 / self.n + (x - self.log_s_mean) ** 2 / self.log_s_sxx)
        half = t_quantile(level, self.n - 2) * se
        line = self.predict(S)
        return line * np.exp(-half), line * np.exp(half)

    def prediction_interval(self, S: float | np.ndarray, level: float | None = None) -> tuple:
        """Interval for a new model's loss at size S (log-normal residuals, t quantiles)."""
        level = self.level if level is None else level
        x = np.log(np.asarray(S, dtype=np.float64))
        se = self.residual_sd * np.sqrt(1 + 1 / self.n + (x - self.log_s_mean) ** 2 / self.log_s_sxx)
        half = t_quantile(level, self.n - 2) * se
        centre = np.log(self.predict(S))
        return np.exp(centre - half), np.exp(centre + half)


def fit_power_law(S: Sequence[float], y: Sequence[float], level: float = 0.95) -> PowerLawFit:
    """OLS of log y on log S: y = prefactor * S^-alpha. Raises ValueError on unusable input.

    Examples
    --------
    >>> line = fit_power_law([1e6, 1e7, 1e8, 1e9], [2.0, 1.55, 1.3, 1.02])
    >>> round(line.alpha, 4), round(line.r2, 4), round(float(line.predict(1e10)), 4)
    (0.0954, 0.9955, 0.8224)
    >>> low, high = line.confidence_interval(1e10)  # where the law's line lies at S = 1e10
    >>> round(float(low), 4), round(float(high), 4)
    (0.7268, 0.9305)
    """
    S, y = np.asarray(S, dtype=np.float64), np.asarray(y, dtype=np.float64)
    problem = unusable_reason(S, y)
    if problem:
        raise InvalidArgumentError(problem)
    return _fit_power_law(S, y, level)


def _fit_power_law(S: np.ndarray, y: np.ndarray, level: float) -> PowerLawFit:
    """`fit_power_law` of float64 arrays that `unusable_reason` accepts (checked once per group)."""
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    x = np.log(S)
    slope, intercept, rss, tss, sxx = ols(x, np.log(y)[:, None])
    n = len(S)
    df = n - 2
    resid_sd = float(np.sqrt(rss[0] / df)) if df > 0 else float("nan")
    se = float(resid_sd / np.sqrt(sxx))
    half = t_quantile(level, df) * se
    alpha = float(-slope[0])
    return PowerLawFit(
        alpha=alpha,
        prefactor=float(np.exp(intercept[0])),
        r2=float(r_squared(rss, tss)[0]) if df > 0 else float("nan"),
        alpha_se=se,
        alpha_low=alpha - half,
        alpha_high=alpha + half,
        residual_sd=resid_sd,
        n=n,
        level=level,
        log_s_mean=float(x.mean()),
        log_s_sxx=sxx,
    )


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


FIT_COLUMNS = ("alpha", "prefactor", "r2", "alpha_se", "alpha_low", "alpha_high", "residual_sd")


def fit_columns(x: np.ndarray, y: np.ndarray, level: float = 0.95) -> dict:
    """One table row's worth of `fit_power_law(x, y)`: the `FIT_COLUMNS` and note = None, or only
    note = why the points cannot be fitted. The row of `scaling_fits` (x = S) and of
    `data_scaling.data_fits` (x = D, alpha read as beta)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    problem = unusable_reason(x, y)
    if problem is not None:
        return {"note": problem}
    fit = _fit_power_law(x, y, level)
    return {**{name: getattr(fit, name) for name in FIT_COLUMNS}, "note": None}


def compare_fits(
    fits: pd.DataFrame, reference: pd.DataFrame, on: Sequence[str] = ("family", "k"), label: str = "paper"
) -> pd.DataFrame:
    """Each fit of `fits` beside the `reference` fit it shares `on` with (e.g. this study's GPT-2
    exponents beside those of the paper's own GPT-2 numbers, per k). The reference's columns come
    prefixed with `label` (its corpus and tie convention included, which may differ from this
    study's); alpha_ratio is alpha / the reference's alpha and intervals_overlap says whether the
    two intervals share a point. Fits without a counterpart are left out: no GPT-2, no rows."""
    own = ["corpus", "ties", "alpha", "alpha_low", "alpha_high", "r2", "n_models"]
    left = fits[[*on, *(c for c in own if c in fits.columns and c not in on)]]
    right = reference[[*on, *(c for c in own if c in reference.columns and c not in on)]]
    right = right.rename(columns={c: f"{label}_{c}" for c in right.columns if c not in on})
    table = left.merge(right, on=list(on), how="inner")
    table["alpha_ratio"] = table["alpha"] / table[f"{label}_alpha"]
    table["intervals_overlap"] = (table["alpha_low"] <= table[f"{label}_alpha_high"]) & (
        table[f"{label}_alpha_low"] <= table["alpha_high"]
    )
    return table.reset_index(drop=True)


def scaling_fits(
    table: pd.DataFrame, y: str = "loss", by: Iterable[str] | None = None, level: float = 0.95
) -> pd.DataFrame:
    """One power-law fit per group: alpha, prefactor, r2, alpha_se, alpha_low/high (t),
    residual_sd, leave-one-model-out range (alpha_loo_min/max) and jackknife SE, n_models,
    S_min, S_max, note (why a fit is missing, or `TWO_MODELS_NOTE` when r2 and the interval are
    NaN because the group has only two models).

    Examples
    --------
    >>> import pandas as pd
    >>> table = pd.DataFrame({"model": ["a", "b", "c"], "S": [1e6, 1e7, 1e8], "loss": [2.0, 1.6, 1.28]})
    >>> scaling_fits(table)[["alpha", "r2", "n_models"]].round(4)
        alpha   r2  n_models
    0  0.0969  1.0         3
    """
    by = grouping_columns(table, by)
    rows = []
    for key, S, v in model_groups(table, y, by):
        row = {**key, "n_models": len(S), "S_min": S.min(), "S_max": S.max(), **fit_columns(S, v, level)}
        if row["note"] is None:
            if len(S) <= 2:
                row["note"] = TWO_MODELS_NOTE
            if len(S) >= 3:
                loo = _loo_alphas(S, v)
                n = np.sum(np.isfinite(loo))
                row.update(
                    alpha_loo_min=np.nanmin(loo),
                    alpha_loo_max=np.nanmax(loo),
                    alpha_jackknife_se=float(np.sqrt((n - 1) / n * np.nansum((loo - np.nanmean(loo)) ** 2))),
                )
        rows.append(row)
    cols = ["alpha", "prefactor", "r2", "alpha_se", "alpha_low", "alpha_high", "residual_sd"]
    cols += ["alpha_loo_min", "alpha_loo_max", "alpha_jackknife_se", "n_models", "S_min", "S_max", "note"]
    return pd.DataFrame(rows).reindex(columns=by + cols)


def extrapolation_check(
    table: pd.DataFrame,
    n_holdout: int = 1,
    y: str = "loss",
    by: Iterable[str] | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Fit on all but the `n_holdout` largest models of each group and predict them: the
    `prediction_audit` of one holdout, in the columns this function has always had (its interval
    now named like the audit's).

    One row per held-out model: loss_observed, loss_predicted with a prediction interval
    (loss_predicted_low/high, needs >= 3 fitted models), inside_interval, loss_log_error =
    log(predicted/observed), and the same on the metric's own scale (value_* ; RBP_k =
    exp(-loss) for rbp, loss itself for CE) with value_error = predicted - observed. Groups
    with fewer than two usable models left to fit are skipped."""
    if n_holdout < 1:
        raise InvalidArgumentError(f"n_holdout must be >= 1, got {n_holdout}")
    by = grouping_columns(table, by)
    keys = [c for c in by if c != "model"]
    # The metric decides the value scale; carried through the audit when each group has one.
    carry = (
        "metric" in table.columns
        and "metric" not in by
        and (not by or table.groupby(by, dropna=False)["metric"].nunique().max() <= 1)
    )
    audit = prediction_audit(
        table, [n_holdout], y=y, x="S", by=by + (["metric"] if carry else []), level=level
    )
    metric = audit["metric"] if "metric" in audit.columns else pd.Series(None, index=audit.index)
    to_value = (metric.isin(_VALUE_IS_EXP_NEG_LOSS) & (y == "loss")).to_numpy()
    obs, pred = audit["loss_observed"].to_numpy(np.float64), audit["loss_predicted"].to_numpy(np.float64)
    out = audit[keys].assign(
        model=audit["held_out"],
        S=audit["x"],
        n_fit=audit["n_fit"],
        alpha_fit=audit["alpha_fit"],
        loss_observed=obs,
        loss_predicted=pred,
        loss_predicted_low=audit["loss_predicted_low"],
        loss_predicted_high=audit["loss_predicted_high"],
        # bool when every held-out model has an interval, as before; <NA> marks those without one
        inside_interval=(
            audit["covered"].astype(bool)
            if audit["covered"].notna().all()
            else audit["covered"].astype(object).where(audit["covered"].notna(), pd.NA)
        ),
        loss_log_error=-audit["log_error"],
        value_observed=np.where(to_value, np.exp(-obs), obs),
        value_predicted=np.where(to_value, np.exp(-pred), pred),
    )
    out["value_error"] = out["value_predicted"] - out["value_observed"]
    return out.reset_index(drop=True)


AUDIT_COLUMNS = (
    "n_holdout", "held_out", "x", "n_fit", "alpha_fit", "r2_fit", "loss_observed", "loss_predicted",
    "loss_predicted_low", "loss_predicted_high", "log_error", "interval_units", "covered",
)  # fmt: skip


def prediction_audit(
    table: pd.DataFrame,
    n_holdouts: Iterable[int] = (1, 2),
    y: str = "loss",
    x: str = "S",
    by: Iterable[str] | None = None,
    level: float = 0.95,
    label: str = "model",
) -> pd.DataFrame:
    """Does the law predict the next model? For each group and each n in `n_holdouts`, fit the
    power law y = A x^-alpha on all but the n largest x (model size S, or tokens seen D along a
    checkpoint run) and predict the n held out with a `level` prediction interval.

    One row per (group, n_holdout, held-out point): held_out (its `label`: the model, or a
    checkpoint's revision), x, n_fit, alpha_fit, r2_fit,
    loss_observed, loss_predicted, loss_predicted_low/high, log_error = log(observed /
    predicted), interval_units = log_error / the interval's half-width in log space (|.| <= 1
    exactly when the interval covers; a systematic sign says the law bends), covered (<NA>
    with two fitted points: no residual scatter, no interval). Groups with fewer than two
    distinct x left to fit are skipped. Rows repeated with identical values (CE over k) are
    collapsed; a group must hold one value per x."""
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    holdouts = sorted({int(n) for n in n_holdouts})
    if not holdouts or holdouts[0] < 1:
        raise InvalidArgumentError(f"n_holdouts must be positive integers, got {list(n_holdouts)}")
    for col in (x, y):
        if col not in table.columns:
            raise InvalidArgumentError(f"table needs column {col!r}; it has {list(table.columns)}")
    by = grouping_columns(table, by, exclude=(x,))
    rows = []
    grouped = table.groupby(by, dropna=False, sort=True) if by else [((), table)]
    for key, frame in grouped:
        key = key if isinstance(key, tuple) else (key,)
        labels = dict(zip(by, key, strict=True))
        frame = frame.drop_duplicates([x, y]).sort_values(x, kind="stable")
        if frame[x].duplicated().any():
            raise InvalidArgumentError(
                f"group {labels}: several {y} values at {x} = {frame.loc[frame[x].duplicated(), x].iloc[0]}"
            )
        X, v = frame[x].to_numpy(np.float64), frame[y].to_numpy(np.float64)
        names = frame[label].to_numpy() if label in frame else np.arange(len(X))
        for n_out in holdouts:
            n_fit = len(X) - n_out
            if n_fit < 2 or unusable_reason(X[:n_fit], v[:n_fit]):
                continue
            pl = fit_power_law(X[:n_fit], v[:n_fit], level)
            for i in range(n_fit, len(X)):
                pred = float(pl.predict(X[i]))
                low, high = (float(b) for b in pl.prediction_interval(X[i]))
                half = np.log(high / pred) if np.isfinite(high) else np.nan
                log_err = float(np.log(v[i] / pred)) if v[i] > 0 and np.isfinite(v[i]) else np.nan
                rows.append(
                    {**labels, "n_holdout": n_out, "held_out": names[i], "x": X[i], "n_fit": n_fit}
                    | {"alpha_fit": pl.alpha, "r2_fit": pl.r2, "loss_observed": v[i]}
                    | {"loss_predicted": pred, "loss_predicted_low": low, "loss_predicted_high": high}
                    | {"log_error": log_err, "interval_units": log_err / half if half > 0 else np.nan}
                    | {"covered": bool(low <= v[i] <= high) if np.isfinite(low) else pd.NA}
                )
    out = pd.DataFrame(rows).reindex(columns=by + list(AUDIT_COLUMNS))
    out["covered"] = out["covered"].astype("boolean")
    return out


def audit_summary(audit: pd.DataFrame, by: Iterable[str] | None = None) -> pd.DataFrame:
    """Coverage of a `prediction_audit` per group (default: n_holdout and, when present,
    metric): n (held-out predictions with an interval), n_covered, coverage, median and max
    |interval_units|, mean log_error (its sign: the law over- or under-predicts the loss)."""
    by = [c for c in ("n_holdout", "metric") if c in audit.columns] if by is None else list(by)
    rows = []
    scored = audit[audit["covered"].notna()]
    for key, part in scored.groupby(by, dropna=False, sort=True) if by else [((), scored)]:
        key = key if isinstance(key, tuple) else (key,)
        units = part["interval_units"].abs()
        rows.append(
            dict(zip(by, key, strict=True))
            | {"n": len(part), "n_covered": int(part["covered"].sum())}
            | {"coverage": float(part["covered"].mean()), "median_abs_units": float(units.median())}
            | {"max_abs_units": float(units.max()), "mean_log_error": float(part["log_error"].mean())}
        )
    cols = ["n", "n_covered", "coverage", "median_abs_units", "max_abs_units", "mean_log_error"]
    return pd.DataFrame(rows).reindex(columns=by + cols)


# ---- document-bootstrap uncertainty of the fits --------------------------------------------------
# Each replicate resamples a corpus's documents once and re-evaluates every model of that corpus
# on the same resample, so the models' errors stay paired; the OLS is the one above, vectorised
# over replicates and thresholds.


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
    n_boot, n_boot_valid (replicates where every model's loss was positive and finite).
    With two models r2 and its bootstrap summaries are NaN (no residual degrees of freedom)."""
    check_ties(ties)
    runs = as_runs(runs)
    if n_boot < 2:
        raise InvalidArgumentError(f"n_boot must be >= 2, got {n_boot}")
    ks_all = None if ks is None else as_ks(ks, np.iinfo(np.int64).max)
    fam_ks = {}
    for fam in {r.family for r in runs}:
        v_min = min(r.vocab_size for r in runs if r.family == fam)
        fam_ks[fam] = standard_ks(v_min) if ks_all is None else ks_all[ks_all <= v_min]
        if not len(fam_ks[fam]):
            raise InvalidArgumentError(
                f"no k in {list(ks_all)} fits family {fam!r} (smallest vocabulary {v_min})"
            )
    q = [(1 - level) / 2, 0.5, (1 + level) / 2]
    rows = []
    for corpus in sorted({r.corpus for r in runs}):
        c_runs = [r for r in runs if r.corpus == corpus]
        n_docs = max(r.n_docs for r in c_runs)
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
                alpha, r2 = fit_many(S, loss)
                alpha0, r20 = fit_many(S, point[metric])
                if len(idx) <= 2:  # a line through two points: R^2 = 1 whatever the data
                    r2, r20 = np.full_like(r2, np.nan), np.full_like(r20, np.nan)
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
