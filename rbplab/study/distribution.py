"""The rank distribution and its lognormal theory (paper section 5.2, appendix B, Figure 8).

Functions of a `Study`: `lognormal` (per run the fitted lognormal, its comparison with other
laws and the appendix-B predictions), `lognormal_intervals` (document-bootstrap intervals on mu,
sigma, mu/sigma), `lognormal_scaling` (how they scale with S), `rank_pmf` (empirical and fitted
rank frequencies) and `ce_comparison` / `ce_exponents` (cross-entropy and -log RBP_1 against S,
measured and as the theory predicts them). The lognormal fits are computed once per study.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rbplab.analysis import fit, metrics
from rbplab.analysis import lognormal as analysis_lognormal
from rbplab.analysis.lognormal import fit_lognormal, lognormal_pmf
from rbplab.study.study import Study


def lognormal(study: Study) -> pd.DataFrame:
    """Per run: fitted mu, sigma, mu/sigma, likelihood ratios against the power law and
    log-logistic, measured CE and -log RBP_1, appendix-B predictions
    (`rbplab.analysis.lognormal.lognormal_table`). Computed once, then cached.

    Examples
    --------
    >>> from rbplab.study import distribution, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> distribution.lognormal(study)[["model", "corpus", "mu", "sigma"]].head(2).round(3)
             model       corpus     mu  sigma
    0  synthetic-0  synthetic-a  2.548  1.979
    1  synthetic-1  synthetic-a  2.272  1.938
    """
    if "lognormal" not in study.memo:
        study.memo["lognormal"] = analysis_lognormal.lognormal_table(study.runs, ties=study.ties)
    return study.memo["lognormal"]


def lognormal_intervals(study: Study, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """Per run: mu, sigma and mu/sigma of the fitted lognormal with document-bootstrap intervals
    at the study's level (`rbplab.analysis.lognormal`: replicates fitted on the
    summary's k grid, their spread added to the exact fit's estimate)."""
    key = ("lognormal_intervals", n_boot, seed)
    if key not in study.memo:
        study.memo[key] = analysis_lognormal.lognormal_intervals(
            study.runs, study.ties, study.level, n_boot, seed
        )
    return study.memo[key]


def lognormal_scaling(study: Study) -> pd.DataFrame:
    """How mu, sigma and mu/sigma scale with S (`rbplab.analysis.lognormal.parameter_scaling`)."""
    study.check_one_step("lognormal scaling")
    return analysis_lognormal.parameter_scaling(lognormal(study))


def rank_pmf(study: Study, corpus: str, n_bins: int = 70) -> pd.DataFrame:
    """Empirical rank frequencies and the fitted lognormal's, per model of `corpus`, in
    log-spaced rank bins (exact for small ranks) divided by the bin width, so the curve is
    a per-rank frequency that a log-log plot of |V| ranks can draw cheaply."""
    # The full table's fit when it exists; otherwise only the lognormal fit of each run of this
    # corpus (the same fit, without the table's comparisons: a dropdown change stays quick).
    table = study.memo.get("lognormal")
    frames = []
    for r in study.subset(corpora=corpus).runs:
        if table is not None:
            row = table[
                (table["family"] == r.family) & (table["model"] == r.model) & (table["corpus"] == corpus)
            ]
            mu, sigma = float(row["mu"].iloc[0]), float(row["sigma"].iloc[0])
        else:
            key = ("lognormal_fit", r.family, r.model, r.corpus)
            if key not in study.memo:
                params = fit_lognormal(metrics.rank_histogram(r.stats, study.ties)).params
                study.memo[key] = (params["mu"], params["sigma"])
            mu, sigma = study.memo[key]
        curve = study.curves[(r.family, r.model, r.corpus)]
        vocab = curve.vocab_size
        edges = np.unique(np.round(np.geomspace(1, vocab + 1, n_bins)).astype(np.int64))
        cum_emp = curve.cumulative / curve.n_tokens  # cum_emp[j] = Pr(R <= j)
        pmf = lognormal_pmf(mu, sigma, vocab)
        cum_fit = np.r_[0.0, np.cumsum(pmf)]
        width = np.diff(edges)
        lo, hi = edges[:-1] - 1, edges[1:] - 1  # bin [edges_i, edges_i+1) in rank
        frames.append(
            pd.DataFrame(
                {
                    "family": r.family,
                    "corpus": corpus,
                    "model": r.model,
                    "S": r.S,
                    "rank": edges[:-1],
                    "empirical": (cum_emp[hi] - cum_emp[lo]) / width,
                    "fitted": (cum_fit[hi] - cum_fit[lo]) / width,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def ce_comparison(study: Study, n_grid: int = 30) -> pd.DataFrame:
    """Cross-entropy and -log RBP_1 against S: measured per model (source "empirical")
    and as the lognormal theory predicts them from the fitted (mu, sigma) trends (for CE:
    the rank entropy of the discretised model, the appendix-B reading of CE)
    (`rbplab.analysis.lognormal.simulate_scaling`, source "lognormal"). Columns family, corpus,
    S, quantity, value, source."""
    study.check_one_step("the CE comparison")
    table = lognormal(study)
    frames = [
        table.melt(
            id_vars=["family", "corpus", "model", "S"],
            value_vars=["ce", "neg_log_rbp1"],
            var_name="quantity",
            value_name="value",
        ).assign(source="empirical")
    ]
    for (family, corpus), part in table.groupby(["family", "corpus"], sort=False):
        if part["S"].nunique() < 2:
            continue
        vocab = int(part["vocab_size"].min())
        try:
            sim = analysis_lognormal.simulate_scaling(part, n_grid=n_grid, vocab_size=vocab)
        except ValueError:
            # sigma's linear trend turns negative within the S range (a noisy family):
            # hypothesis 2 only needs mu/sigma to scale, so hold sigma at its mean.
            sim = analysis_lognormal.simulate_scaling(
                part, n_grid=n_grid, vocab_size=vocab, sigma_mode="constant"
            )
        frames.append(
            sim.rename(columns={"rank_entropy_discrete": "ce", "neg_log_p1_discrete": "neg_log_rbp1"})
            .melt(id_vars=["S"], value_vars=["ce", "neg_log_rbp1"], var_name="quantity", value_name="value")
            .assign(family=family, corpus=corpus, model=None, source="lognormal")
        )
    out = pd.concat(frames, ignore_index=True)
    out["quantity"] = out["quantity"].map({"ce": "CE", "neg_log_rbp1": "-log RBP_1"})
    return out[["family", "corpus", "model", "S", "quantity", "value", "source"]]


def ce_exponents(study: Study) -> pd.DataFrame:
    """Power-law exponents of CE and -log RBP_1 against S, measured and lognormal-predicted,
    per family and corpus: the paper's observation that the two are nearly equal (Fig. 8a/b).
    The theory's "CE" is the rank entropy (`rbplab.analysis.lognormal`). Its curves
    are deterministic functions of the fitted trends, so their alpha has no t-interval
    (alpha_low/high are NaN for source "lognormal")."""
    study.check_one_step("the CE exponents")
    # Without the model column: the theory's curve is a grid of S values, not models.
    comp = ce_comparison(study).drop(columns="model")
    fits = fit.scaling_fits(comp, y="value", by=["family", "corpus", "source", "quantity"], level=study.level)
    fits.loc[fits["source"] == "lognormal", ["alpha_low", "alpha_high"]] = np.nan
    return fits[["family", "corpus", "source", "quantity", "alpha", "alpha_low", "alpha_high", "r2"]]
