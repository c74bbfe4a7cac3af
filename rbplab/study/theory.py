"""Lognormal theory of ranks for a `Study` (paper section 5.2, appendix B).

Each function takes a study and returns a tidy table; `Study.lognormal`, `lognormal_scaling`,
`rank_pmf`, `ce_comparison` and `ce_exponents` delegate here. The per-run lognormal fits are
computed once and kept in the study's cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rbplab.analysis import fit, lognormal, lognormal_theory

if TYPE_CHECKING:
    from rbplab.study.study import Study


def lognormal_table(study: Study) -> pd.DataFrame:
    """Per run: fitted mu, sigma, mu/sigma, likelihood ratios against the power law and
    log-logistic, measured CE and -log RBP_1, appendix-B predictions
    (`rbplab.analysis.lognormal_theory.lognormal_table`). Computed once, then cached."""
    if "lognormal" not in study._cache:
        study._cache["lognormal"] = lognormal_theory.lognormal_table(study.runs, ties=study.ties)
    return study._cache["lognormal"]


def lognormal_scaling(study: Study) -> pd.DataFrame:
    """How mu, sigma and mu/sigma scale with S (`rbplab.analysis.lognormal_theory.parameter_scaling`)."""
    return lognormal_theory.parameter_scaling(study.lognormal())


def rank_pmf(study: Study, corpus: str, n_bins: int = 70) -> pd.DataFrame:
    """Empirical rank frequencies and the fitted lognormal's, per model of `corpus`, in
    log-spaced rank bins (exact for small ranks) divided by the bin width, so the curve is
    a per-rank frequency that a log-log plot of |V| ranks can draw cheaply."""
    # Reuse the full table when it exists; otherwise fit only this corpus (a dropdown change).
    table = study._cache.get("lognormal")
    if table is None:
        table = study.subset(corpora=corpus).lognormal()
    frames = []
    for r in study.subset(corpora=corpus).runs:
        row = table[(table["family"] == r.family) & (table["model"] == r.model) & (table["corpus"] == corpus)]
        curve = study.curves[(r.family, r.model, r.corpus)]
        vocab = curve.vocab_size
        edges = np.unique(np.round(np.geomspace(1, vocab + 1, n_bins)).astype(np.int64))
        cum_emp = curve.cumulative / curve.n_tokens  # cum_emp[j] = Pr(R <= j)
        pmf = lognormal.lognormal_pmf(float(row["mu"].iloc[0]), float(row["sigma"].iloc[0]), vocab)
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
    and as the lognormal theory predicts them from the fitted (mu, sigma) trends
    (`rbplab.analysis.lognormal_theory.simulate_scaling`, source "lognormal"). Columns family, corpus,
    S, quantity, value, source."""
    table = study.lognormal()
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
            sim = lognormal_theory.simulate_scaling(part, n_grid=n_grid, vocab_size=vocab)
        except ValueError:
            # sigma's linear trend turns negative within the S range (a noisy family):
            # hypothesis 2 only needs mu/sigma to scale, so hold sigma at its mean.
            sim = lognormal_theory.simulate_scaling(
                part, n_grid=n_grid, vocab_size=vocab, sigma_mode="constant"
            )
        frames.append(
            sim.rename(columns={"ce_discrete": "ce", "neg_log_p1_discrete": "neg_log_rbp1"})
            .melt(id_vars=["S"], value_vars=["ce", "neg_log_rbp1"], var_name="quantity", value_name="value")
            .assign(family=family, corpus=corpus, model=None, source="lognormal")
        )
    out = pd.concat(frames, ignore_index=True)
    out["quantity"] = out["quantity"].map({"ce": "CE", "neg_log_rbp1": "-log RBP_1"})
    return out[["family", "corpus", "model", "S", "quantity", "value", "source"]]


def ce_exponents(study: Study) -> pd.DataFrame:
    """Power-law exponents of CE and -log RBP_1 against S, measured and lognormal-predicted,
    per family and corpus: the paper's observation that the two are nearly equal (Fig. 8a/b)."""
    # Without the model column: the theory's curve is a grid of S values, not models.
    comp = study.ce_comparison().drop(columns="model")
    fits = fit.scaling_fits(comp, y="value", by=["family", "corpus", "source", "quantity"], level=study.level)
    return fits[["family", "corpus", "source", "quantity", "alpha", "alpha_ci_low", "alpha_ci_high", "r2"]]
