"""One sentence per notebook that states its result with intervals, for the notebook's top, the
report's index and the results file.

Each function reads the table the notebook already computed (no statistics here) and writes
plain text: estimates as "0.036 [0.030, 0.043]" (the table's interval), subscripts as
"RBP_1" (rendered as HTML by `rbplab.viz.layout.html_label` where the sentence is shown).
"""

from __future__ import annotations

import pandas as pd

LAW = "−log RBP_k(S) = A · S^−α"  # the relative-based scaling law, as the index states it
JOINT_LAW = "L(S, D) = E + A · S^−α + B · D^−β"


def _estimate(row: pd.Series | dict, name: str) -> str:
    value = row.get(name)
    if value is None or pd.isna(value):
        return "n/a"
    lo, hi = row.get(f"{name}_low"), row.get(f"{name}_high")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return f"{value:.3g}"
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]"


def _size(S: float) -> str:
    for threshold, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if S >= threshold:
            return f"{S / threshold:.3g}{suffix}"
    return f"{S:.3g}"


def _corpus_list(parts: list[str]) -> str:
    return "; ".join(parts)


def size_law(fits: pd.DataFrame, k: int = 1, level: float = 0.95) -> str:
    """Notebook 01: the exponent of -log RBP_k against S at `k`, per family and corpus."""
    rows = fits[fits["k"] == k]
    if rows.empty:
        return f"No fit at k = {k}."
    several = rows["family"].nunique() > 1
    parts = [
        f"{(r['family'] + ' · ') if several else ''}{r['corpus']}: α = {_estimate(r, 'alpha')}"
        f" (R² = {r['r2']:.3f})"
        for _, r in rows.iterrows()
    ]
    n = int(rows["n_models"].max()) if "n_models" in rows else None
    sizes = ""
    if {"S_min", "S_max"} <= set(rows.columns):
        sizes = f", S = {_size(rows['S_min'].min())} to {_size(rows['S_max'].max())}"
    models = f" over {n} models{sizes}" if n else ""
    return (
        f"−log RBP_{k} falls as a power of model size, −log RBP_{k} = A · S^−α{models} "
        f"({level:.0%} intervals): {_corpus_list(parts)}."
    )


def k_sweep(sweep: pd.DataFrame, summary: pd.DataFrame, r2_threshold: float = 0.9) -> str:
    """Notebook 02: how far in k the law holds (R² >= threshold) and how α grows from k = 1 to 100."""
    parts = []
    for _, s in summary.iterrows():
        cell = sweep[(sweep["family"] == s["family"]) & (sweep["corpus"] == s["corpus"])].set_index("k")
        grows = ""
        if 1 in cell.index and 100 in cell.index:
            low, high = _estimate(cell.loc[1], "alpha"), _estimate(cell.loc[100], "alpha")
            grows = f", α = {low} at k = 1 and {high} at k = 100"
        valid = (
            "no range"
            if pd.isna(s["k_max_r2"])
            else f"R² ≥ {r2_threshold:g} up to k = {int(s['k_max_r2']):,}"
        )
        parts.append(f"{s['corpus']}: {valid}{grows}")
    where = f"R² ≥ {r2_threshold:g} for every smaller k"
    return f"Where in k the power law fits ({where}), and α(k): {_corpus_list(parts)}."


def emergence(em_fits: pd.DataFrame, k: int) -> str:
    """Notebook 03: the exponent of -log p_{N,k} fitted over every N against the token-level one."""
    rows = em_fits[em_fits["k"] == k].drop_duplicates(["family", "corpus"])
    if rows.empty:
        return f"No emergence fit at k = {k}."
    parts = [
        f"{r['corpus']}: α_joint = {r['alpha_joint']:.3g} (R² = {r['r2_joint']:.3f}) vs token-level "
        f"α = {r['alpha_token']:.3g}"
        for _, r in rows.iterrows()
    ]
    return (
        f"Sequence success p(N, k) ≈ exp(−C · N · S^−α) at k = {k}, fitted over every N, against the "
        f"token-level exponent: {_corpus_list(parts)}."
    )


def lognormal(exponents: pd.DataFrame) -> str:
    """Notebook 04: the measured exponents of CE and -log RBP_1 against S, with intervals."""
    measured = exponents[exponents["source"] == "empirical"]
    parts = []
    for corpus, part in measured.groupby("corpus", sort=False):
        by = part.set_index("quantity")
        values = [f"{q} α = {_estimate(by.loc[q], 'alpha')}" for q in by.index]
        parts.append(f"{corpus}: {', '.join(values)}")
    return (
        "Measured exponents against S of −log RBP_1 and the cross-entropy (a lognormal rank "
        f"distribution predicts nearly equal ones): {_corpus_list(parts)}."
    )


def extraction(entries: pd.DataFrame) -> str:
    """Notebook 05: what the cache holds after the run."""
    complete = entries[entries["complete"]]
    new = int(entries["new"].sum()) if "new" in entries else 0
    tokens = int(complete["n_tokens"].sum()) if len(complete) else 0
    return (
        f"The cache holds {len(complete)} complete entries ({new} new in this run): "
        f"{complete['model'].nunique()} models × {complete['corpus'].nunique()} corpora, "
        f"{tokens:,} scored tokens."
    )


def training(joint: pd.DataFrame, synthetic: bool) -> str:
    """Notebook 06: the joint law's exponents per corpus and quantity, with bootstrap intervals."""
    parts = []
    for _, r in joint.iterrows():
        parts.append(
            f"{r['corpus']} {r['quantity']}: α = {_estimate(r, 'alpha')}, β = {_estimate(r, 'beta')}"
        )
    lead = (
        "SYNTHETIC DATA (checkpoints drawn from a known law, not a model): "
        if synthetic
        else "On the scored checkpoints, "
    )
    return f"{lead}{JOINT_LAW} with {_corpus_list(parts)}."


def decomposition(fits: pd.DataFrame) -> str:
    """Notebook 07: the exponents of CE and of its error entropy EE against S per corpus, and
    how flat SA and Conf stay (their exponents), from `Study.decomposition_fits`."""
    parts = []
    for corpus, part in fits.groupby("corpus", sort=False):
        by = part.set_index("metric")
        terms = [
            f"{label} α = {_estimate(by.loc[m], 'alpha')} (R² = {by.loc[m, 'r2']:.3f})"
            for m, label in (("ce", "CE"), ("ee", "EE"))
            if m in by.index and pd.notna(by.loc[m, "alpha"])
        ]
        flat = [
            f"{label} α = {by.loc[m, 'alpha']:.3g}"
            for m, label in (("sa", "SA"), ("conf", "Conf"))
            if m in by.index and pd.notna(by.loc[m, "alpha"])
        ]
        parts.append(f"{corpus}: {', '.join(terms + flat)}")
    return f"Cross-entropy split as CE = EE + SA − Conf, exponents against S: {_corpus_list(parts)}."


def prediction_audit(summary: pd.DataFrame, level: float = 0.95) -> str:
    """Notebook 07: how often the law fitted on the smaller models predicted the held-out ones
    within its prediction interval (`rbplab.analysis.fit.audit_summary`, by n_holdout and metric)."""
    if summary.empty:
        return "No prediction could be audited (too few model sizes)."
    names = {"rbp": "−log RBP_k", "ce": "CE", "ee": "EE", "ee_mm": "EE (Miller-Madow)", "mrr": "−log MRR"}
    parts = []
    for n_out, part in summary.groupby("n_holdout", sort=True):
        held = "the largest size" if n_out == 1 else f"the {n_out} largest sizes"
        counts = ", ".join(
            f"{names.get(r['metric'], r['metric'])} {int(r['n_covered'])}/{int(r['n'])}"
            f" (median |error| {r['median_abs_units']:.2f} half-widths)"
            for _, r in part.iterrows()
        )
        parts.append(f"holding out {held}: {counts}")
    lead = f"Does the law predict the next model? Predictions inside their {level:.0%} interval"
    return f"{lead}, {_corpus_list(parts)}."
