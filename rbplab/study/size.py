"""The size law: -log RBP_k = A S^-alpha per family, corpus and k, fitted over a study's models.

Functions of a `Study` (paper Figures 3-6): `fits` and `fit_table` (the exponents), `bands` (the
fitted line with its confidence or prediction band), `curve_frame` and `ksweep` (RBP_k and the law
as functions of k), `bootstrap` (document-bootstrap uncertainty of the exponents) and
`extrapolation` (does the law predict the largest model). In a study of checkpoints the law is
fitted per training step, never across steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from rbplab.analysis import fit, metrics
from rbplab.analysis.ksweep import k_sweep
from rbplab.core.errors import InvalidArgumentError
from rbplab.study.study import Study

BAND_POINTS = 40


def size_law_groups(points: pd.DataFrame) -> list[str]:
    """Groups of one size law: a study of checkpoints has one per training step."""
    return ["family", "corpus", "k", *(["step"] if "step" in points.columns else [])]


def fits(
    study: Study,
    ks: Iterable[int] | int,
    corpora: Sequence[str] | None = None,
    points: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Power law -log RBP_k = A S^-alpha per family, corpus and k (`rbplab.analysis.fit.scaling_fits`):
    alpha, prefactor, r2, alpha_se, alpha_low/high, leave-one-out range, n_models, note.
    In a study of checkpoints the law is fitted per training step (a `step` column), never
    across them. `points` (from `study.points(ks, corpora)`) saves recomputing them.

    Examples
    --------
    >>> from rbplab.study import size, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> fits = size.fits(study, [1, 10])
    >>> fits[["corpus", "k", "alpha", "alpha_low", "alpha_high", "r2"]].round(3)
            corpus   k  alpha  alpha_low  alpha_high     r2
    0  synthetic-a   1  0.080      0.068       0.091  0.989
    1  synthetic-a  10  0.136      0.122       0.151  0.994
    2  synthetic-b   1  0.069      0.061       0.077  0.993
    3  synthetic-b  10  0.128      0.108       0.149  0.987
    """
    points = study.points(ks, corpora) if points is None else points
    table = points.assign(loss=points["neg_log_rbp"])
    return fit.scaling_fits(table, y="loss", by=size_law_groups(points), level=study.level)


def bands(
    study: Study,
    ks: Iterable[int] | int,
    corpora: Sequence[str] | None = None,
    points: pd.DataFrame | None = None,
    kind: str = "confidence",
) -> pd.DataFrame:
    """The fitted line and its band on a grid of S spanning each family: family, corpus,
    k, S, fit, fit_low, fit_high on the -log RBP_k scale. kind="confidence": where the law's line
    lies (t interval of the OLS mean in log space); kind="prediction": where a new
    model of size S would fall (adds the scatter of models around the line). Per training
    step (a `step` column) in a study of checkpoints, like `fits`.

    Examples
    --------
    >>> from rbplab.study import size, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> bands = size.bands(study, 1)
    >>> list(bands.columns)
    ['family', 'corpus', 'k', 'S', 'fit', 'fit_low', 'fit_high']
    >>> bool((bands["fit_low"] <= bands["fit"]).all() and (bands["fit"] <= bands["fit_high"]).all())
    True
    """
    if kind not in ("confidence", "prediction"):
        raise InvalidArgumentError(f"kind must be 'confidence' or 'prediction', got {kind!r}")
    points = study.points(ks, corpora) if points is None else points
    rows = []
    by = size_law_groups(points)
    for key, frame in points.groupby(by, sort=False, dropna=False):
        S, y = frame["S"].to_numpy(np.float64), frame["neg_log_rbp"].to_numpy(np.float64)
        try:
            pl = fit.fit_power_law(S, y, study.level)
        except ValueError:
            continue  # too few sizes or RBP_k = 1: no line to draw (`fits` says why)
        grid = np.geomspace(S.min(), S.max(), BAND_POINTS)
        lo, hi = pl.prediction_interval(grid) if kind == "prediction" else pl.confidence_interval(grid)
        labels = dict(zip(by, key, strict=True))
        rows.append(
            pd.DataFrame({**labels, "S": grid, "fit": pl.predict(grid), "fit_low": lo, "fit_high": hi})
        )
    cols = [*by, "S", "fit", "fit_low", "fit_high"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


def fit_table(
    study: Study, ks: Iterable[int] | int = (1, 10, 100), corpora: Sequence[str] | None = None
) -> pd.DataFrame:
    """The headline table: one row per family, corpus and k with alpha (and CI), R²."""
    cols = ["family", "corpus", "k", "alpha", "alpha_low", "alpha_high", "r2", "n_models", "note"]
    return fits(study, ks, corpora)[cols]


def curve_frame(
    study: Study, ks: Iterable[int] | None = None, corpora: Sequence[str] | None = None
) -> pd.DataFrame:
    """RBP_k against k for every run (for `plots.rbp_curves`); ks default log-spaced to |V|."""
    ks = metrics.log_spaced_ks(study.vocab_size, 60) if ks is None else ks
    return study.points(ks, corpora)


def ksweep(study: Study, ks: Iterable[int] | None = None, n_boot: int = 0, seed: int = 0) -> pd.DataFrame:
    """alpha(k), R²(k) over k (`rbplab.analysis.ksweep.k_sweep`), regimes labelled.

    Examples
    --------
    >>> from rbplab.study import size, synthetic_study
    >>> sweep = size.ksweep(synthetic_study(n_tokens=2000))
    >>> sweep[["corpus", "k", "regime", "alpha", "r2"]].head(3).round(3)
            corpus  k    regime  alpha     r2
    0  synthetic-a  1       k=1  0.080  0.989
    1  synthetic-a  2  moderate  0.088  0.989
    2  synthetic-a  3  moderate  0.100  0.995
    """
    study.check_one_step("the k-sweep")
    if n_boot > 0:  # the bootstrap reads every run's per-document tables
        return k_sweep(study.runs, ks=ks, ties=study.ties, level=study.level, n_boot=n_boot, seed=seed)
    return k_sweep(_rbp_table(study, ks), level=study.level)


def _rbp_table(study: Study, ks: Iterable[int] | None) -> pd.DataFrame:
    """The RBP rows `metrics_table` gives for the k-sweep, read from the study's curves (each run at
    the thresholds its vocabulary allows), so a study read from the cache index sweeps k without
    reading a summary. Columns are stacked once: a study may hold thousands of runs."""
    wanted = None if ks is None else np.unique(np.asarray(list(ks), dtype=np.int64))
    run_ks, rbp = [], []
    for r in study.runs:
        chosen = metrics.as_ks(None if wanted is None else wanted[wanted <= r.vocab_size], r.vocab_size)
        run_ks.append(chosen)
        rbp.append(np.asarray(study.curves[(r.family, r.model, r.corpus)].rbp(chosen), dtype=np.float64))
    counts = [len(k) for k in run_ks]
    values = np.concatenate(rbp)
    with np.errstate(divide="ignore"):
        loss = -np.log(values)

    def each(name: str) -> np.ndarray:
        return np.repeat(np.array([getattr(r, name) for r in study.runs], dtype=object), counts)

    return pd.DataFrame(
        {
            "family": each("family"),
            "model": each("model"),
            "corpus": each("corpus"),
            "S": np.repeat(np.array([r.S for r in study.runs], dtype=np.float64), counts),
            "metric": "rbp",
            "k": pd.array(np.concatenate(run_ks), dtype="Int64"),
            "value": values,
            "loss": loss,
            "n_tokens": np.repeat([r.n_tokens for r in study.runs], counts),
            "n_docs": np.repeat([r.n_docs for r in study.runs], counts),
            "vocab_size": np.repeat([r.vocab_size for r in study.runs], counts),
            "ties": study.ties,
        }
    )


def bootstrap(
    study: Study, ks: Iterable[int] = (1, 10, 100), n_boot: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Document-bootstrap uncertainty of alpha and R² (`rbplab.analysis.fit.bootstrap_fits`)."""
    study.check_one_step("the bootstrap of the size law")
    return fit.bootstrap_fits(study.runs, ks=ks, ties=study.ties, n_boot=n_boot, seed=seed, level=study.level)


def extrapolation(study: Study, ks: Iterable[int] = (1, 10, 100), n_holdout: int = 1) -> pd.DataFrame:
    """Fit all but the largest model(s), predict them (`rbplab.analysis.fit.extrapolation_check`)."""
    study.check_one_step("extrapolation")
    table = study.points(ks).assign(loss=lambda f: f["neg_log_rbp"], metric="rbp")
    return fit.extrapolation_check(
        table, n_holdout=n_holdout, by=["family", "corpus", "k"], level=study.level
    )
