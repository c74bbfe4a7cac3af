"""The cross-entropy decomposition and the laws of other metrics than RBP_k, with their audit.

Functions of a `Study`: `table` (per run CE = EE + SA - Conf and MRR), `metric_table` (the losses
of every metric, -log RBP_k included, in one long table), `fits` and `bootstrap` (power laws of the
terms against S, with OLS or document-bootstrap intervals) and `prediction_audit` (does the law of
each metric predict the next model, or the next checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from rbplab.analysis import fit
from rbplab.analysis.decomposition import DECOMPOSITION_METRICS, decomposition_row
from rbplab.analysis.decomposition_bootstrap import bootstrap_decomposition_fits
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import TRAINING_FIELDS, model_of_label
from rbplab.core.stats import check_ties
from rbplab.study.study import Study

# Metrics `metric_table`, `fits` and `prediction_audit` know besides "rbp" (per k).
RUN_METRICS = ("ce", *DECOMPOSITION_METRICS)


def table(study: Study, ties: str | None = None) -> pd.DataFrame:
    """Per run: CE = EE + SA - Conf (`rbplab.analysis.decomposition`) and MRR: family, corpus,
    model, S (and revision, step, D, C for checkpoints), ties, n_tokens, n_rbe (RBE values
    observed: SA and Conf grow with them, so compare those at equal n_tokens), ce, ee,
    ee_mm (Miller-Madow), sa, conf, mrr, residual (ce - (ee + sa - conf), ~1e-15). `ties`
    defaults to the study's convention. Computed once per convention, then cached."""
    ties = check_ties(study.ties if ties is None else ties)
    key = ("decomposition", ties)
    if key not in study.memo:
        training = study.has_training
        rows = []
        for r in study.runs:
            d = decomposition_row(r.entry_summary, ties)
            rows.append(
                {"family": r.family, "corpus": r.corpus, "model": r.model, "S": r.S}
                | (r.training if training else {})
                | {"ties": ties, "n_tokens": d["n_tokens"], "n_rbe": d["n_rbe"], "ce": d["ce"]}
                | {m: d[m] for m in ("ee", "ee_mm", "sa", "conf", "mrr")}
                | {"residual": d["ce"] - (d["ee"] + d["sa"] - d["conf"])}
            )
        study.memo[key] = pd.DataFrame(rows)
    return study.memo[key].copy()


def metric_table(
    study: Study, ks: Iterable[int] | int = (1, 10, 100), metrics: Iterable[str] = ("rbp", "ce", "ee")
) -> pd.DataFrame:
    """Long table of per-run losses for the fits: family, corpus, model, S (and revision,
    step, D, C for checkpoints), metric, k (<NA> except for rbp), value, loss (-log RBP_k,
    CE, EE, EE_MM, SA, Conf, or -log MRR), n_tokens.

    Examples
    --------
    >>> from rbplab.study import decomposition, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> table = decomposition.metric_table(study, [1])
    >>> sorted(table["metric"].unique()), len(table)
    (['ce', 'ee', 'rbp'], 36)
    """
    metrics = list(metrics)
    unknown = sorted(set(metrics) - {"rbp", *RUN_METRICS})
    if unknown:
        raise InvalidArgumentError(f"unknown metrics {unknown}; choose from {['rbp', *RUN_METRICS]}")
    ident = ["family", "corpus", "model", "S", *(TRAINING_FIELDS if study.has_training else ())]
    frames = []
    if "rbp" in metrics:
        pts = study.points(ks)
        frames.append(
            pts[[*ident, "k", "n_tokens"]].assign(metric="rbp", value=pts["rbp"], loss=pts["neg_log_rbp"])
        )
    others = [m for m in metrics if m != "rbp"]
    if others:
        dec = table(study)
        long = dec.melt(id_vars=[*ident, "n_tokens"], value_vars=others, var_name="metric")
        long["loss"] = np.where(long["metric"] == "mrr", -np.log(long["value"]), long["value"])
        frames.append(long.assign(k=pd.array([pd.NA] * len(long), dtype="Int64")))
    out = pd.concat(frames, ignore_index=True)
    out["k"] = out["k"].astype("Int64")
    return out[[*ident, "metric", "k", "value", "loss", "n_tokens"]]


def fits(study: Study, metrics: Iterable[str] = RUN_METRICS) -> pd.DataFrame:
    """Power laws of CE, EE, SA, Conf (and MRR as -log MRR) against S per family and corpus
    (per training step for checkpoints), by `rbplab.analysis.fit.scaling_fits`. A term that
    is not positive for every model (Conf can be) has no exponent, and `note` says why."""
    table = metric_table(study, metrics=[m for m in metrics if m != "rbp"])
    by = ["family", "corpus", "metric", *(["step"] if "step" in table.columns else [])]
    return fit.scaling_fits(table.drop(columns="k"), y="loss", by=by, level=study.level)


def bootstrap(study: Study, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """Document-bootstrap intervals of the exponents of EE, EE_MM, SA, Conf and -log MRR
    against S per family and corpus, every model of a corpus on the same resamples
    (`rbplab.analysis.decomposition_bootstrap.bootstrap_decomposition_fits`). Needs each
    run's tokens: a study read from the cache reads them now (one pass per run)."""
    study.check_one_step("the bootstrap of the decomposition")
    stats = [r.token_stats() for r in study.runs]
    return bootstrap_decomposition_fits(
        study.runs, stats, ties=study.ties, n_boot=n_boot, seed=seed, level=study.level
    )


def prediction_audit(
    study: Study,
    ks: Iterable[int] | int = (1, 10, 100),
    n_holdouts: Iterable[int] = (1, 2),
    metrics: Iterable[str] = ("rbp", "ce", "ee"),
    along: str = "S",
) -> pd.DataFrame:
    """Does the law predict the next model (`rbplab.analysis.fit.prediction_audit`)? Per family,
    corpus, metric and k: fit on all but the n largest sizes (each n of `n_holdouts`) and
    predict the held-out -log RBP_k, CE, EE... with a prediction interval at the study's
    level; per training step in a study of checkpoints. along="D": per model of a checkpoint
    study, fit against the tokens seen D on the earliest checkpoints and predict the latest.
    Columns: the group (family, corpus, metric, k [, step]; along D: family, model, corpus,
    metric, k), n_holdout, held_out (the model, or along D the checkpoint's revision), S or D,
    n_fit, alpha_fit, r2_fit, loss_observed, loss_predicted(_low/_high), log_error =
    log(observed / predicted), interval_units (the error in half-widths of the interval),
    covered."""
    if along not in ("S", "D"):
        raise InvalidArgumentError(f"along must be 'S' or 'D', got {along!r}")
    table = metric_table(study, ks, metrics)
    if along == "S":
        by = ["family", "corpus", "metric", "k", *(["step"] if "step" in table.columns else [])]
        label = "model"
    else:
        if "D" not in table.columns or table["D"].isna().all():
            raise InvalidArgumentError(
                "along='D' needs checkpoints with a known D (a study of training revisions)"
            )
        table = table[table["D"].notna()].copy()
        # One law per model along its checkpoints; a held-out row names the checkpoint's revision.
        revisions = table["revision"].astype(str)
        table["model"] = [model_of_label(m, r) for m, r in zip(table["model"], revisions, strict=True)]
        table["revision"] = revisions
        by, label = ["family", "model", "corpus", "metric", "k"], "revision"
    audit = fit.prediction_audit(table, n_holdouts, y="loss", x=along, by=by, level=study.level, label=label)
    return audit.rename(columns={"x": along})
