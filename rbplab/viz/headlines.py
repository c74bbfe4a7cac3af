"""One sentence per notebook that states its result with intervals, for the notebook's top, the
report's index and the results file.

Each function reads the table the notebook already computed (no statistics here) and writes
plain text with `rbplab.core.display`'s numbers: estimates as "0.036 [0.030, 0.043]" (the
table's interval), values too small to show as "< 1e-6", subscripts as
"RBP_1" (rendered as HTML by `rbplab.viz.labels.html_label` where the sentence is shown).
"""

from __future__ import annotations

import pandas as pd

from rbplab.core.display import interval, number, size

LAW = "−log RBP_k(S) = A · S^−α"  # the relative-based scaling law, as the index states it
JOINT_LAW = "L(S, D) = E + A · S^−α + B · D^−β"


MAX_ESTIMATES = 4  # estimates one sentence states; the rest are in the notebook's table


def _estimate(row: pd.Series | dict, name: str) -> str:
    value = row.get(name)
    if value is None or pd.isna(value):
        return "n/a"
    lo, hi = row.get(f"{name}_low"), row.get(f"{name}_high")
    if lo is None or hi is None:
        return interval(value, float("nan"), float("nan"))
    return interval(value, lo, hi)


def _corpus_list(parts: list[str]) -> str:
    return "; ".join(parts)


def _first(parts: list[tuple[str, int]], what: str = "corpora", limit: int = MAX_ESTIMATES) -> str:
    """The parts (text, estimates it states) that fit in `limit` estimates (at least one), and
    how many more the table holds."""
    shown, count = [], 0
    for text, n in parts:
        if shown and count + n > limit:
            break
        shown.append(text)
        count += n
    rest = len(parts) - len(shown)
    name = {"corpora": "corpus"}.get(what, what) if rest == 1 else what
    more = f" ({rest} more {name} in the table)" if rest else ""
    return _corpus_list(shown) + more


def size_law(fits: pd.DataFrame, k: int = 1, level: float = 0.95, paper: pd.DataFrame | None = None) -> str:
    """Notebook 01: the exponent of -log RBP_k against S at `k`, per family and corpus (R² as a
    range over them), and where `paper` (`versus_paper`) holds rows, the paper's own beside them."""
    rows = fits[fits["k"] == k]
    if rows.empty:
        return f"No fit at k = {k}."
    several = rows["family"].nunique() > 1
    parts = [
        (f"{(r['family'] + ' · ') if several else ''}{r['corpus']}: α = {_estimate(r, 'alpha')}", 1)
        for _, r in rows.iterrows()
    ]
    n = int(rows["n_models"].max()) if "n_models" in rows else None
    sizes = ""
    if {"S_min", "S_max"} <= set(rows.columns):
        sizes = f", S = {size(rows['S_min'].min())} to {size(rows['S_max'].max())}"
    models = f" over {n} models{sizes}" if n else ""
    r2 = rows["r2"].dropna()
    fit = ""
    if len(r2):
        fit = f" (R² {r2.min():.3f})" if r2.min() == r2.max() else f" (R² {r2.min():.3f} to {r2.max():.3f})"
    sentence = (
        f"−log RBP_{k} falls as a power of model size, −log RBP_{k} = A · S^−α{models} "
        f"({level:.0%} intervals): {_first(parts)}{fit}."
    )
    return sentence + versus_paper(paper, k) if paper is not None else sentence


PAPER_ALPHA = ("alpha", "alpha_low", "alpha_high")


def _setup(row: pd.Series) -> str:
    """The reference's corpus and tie convention, as far as its table states them."""
    parts = [str(row["paper_corpus"])] if "paper_corpus" in row else []
    parts += [f"{row['paper_ties']} ties"] if "paper_ties" in row else []
    return f" ({', '.join(parts)})" if parts else ""


def versus_paper(comparison: pd.DataFrame, k: int = 1) -> str:
    """Notebook 01: this study's exponents beside the paper's own (`rbplab.analysis.fit.compare_fits`
    of the study's fits and those of `rbplab.catalog.paper_reference`) at `k`; "" without them."""
    rows = comparison[comparison["k"] == k]
    if rows.empty:
        return ""
    parts = [
        (
            f"{r['family']} on {r['corpus']} α = {_estimate(r, 'alpha')} against the paper's "
            f"{_estimate({n: r[f'paper_{n}'] for n in PAPER_ALPHA}, 'alpha')}{_setup(r)}",
            2,
        )
        for _, r in rows.iterrows()
    ]
    return f" Beside the paper's own numbers at k = {k}: {_first(parts)}."


def k_sweep(sweep: pd.DataFrame, summary: pd.DataFrame, r2_threshold: float = 0.9) -> str:
    """Notebook 02: how far in k the law holds (R² >= threshold, α > 0 and its interval above 0 at
    every smaller k: `ksweep.sweep_summary`'s k_max_law) and how α grows from k = 1 to 100."""
    parts = []
    for _, s in summary.iterrows():
        cell = sweep[(sweep["family"] == s["family"]) & (sweep["corpus"] == s["corpus"])].set_index("k")
        grows, n = "", 0
        if 1 in cell.index and 100 in cell.index:
            low, high = _estimate(cell.loc[1], "alpha"), _estimate(cell.loc[100], "alpha")
            grows, n = f", α = {low} at k = 1 and {high} at k = 100", 2
        valid = "no range" if pd.isna(s["k_max_law"]) else f"the law holds up to k = {int(s['k_max_law']):,}"
        parts.append((f"{s['corpus']}: {valid}{grows}", n))
    where = f"R² ≥ {r2_threshold:g}, α > 0 and its interval above 0 at every smaller k"
    return f"Where in k the power law fits ({where}), and α(k): {_first(parts)}."


def emergence(em_fits: pd.DataFrame, k: int) -> str:
    """Notebook 03: the exponent of -log p_{N,k} fitted over every N against the token-level one."""
    rows = em_fits[em_fits["k"] == k].drop_duplicates(["family", "corpus"])
    if rows.empty:
        return f"No emergence fit at k = {k}."
    parts = [
        (
            f"{r['corpus']}: α_joint = {number(r['alpha_joint'])} (R² = {r['r2_joint']:.3f}) vs token-level "
            f"α = {number(r['alpha_token'])}",
            2,
        )
        for _, r in rows.iterrows()
    ]
    return (
        f"Sequence success p(N, k) ≈ exp(−C · N · S^−α) at k = {k}, fitted over every N, against the "
        f"token-level exponent: {_first(parts)}."
    )


def lognormal(exponents: pd.DataFrame) -> str:
    """Notebook 04: the measured exponents of CE and -log RBP_1 against S, with intervals."""
    measured = exponents[exponents["source"] == "empirical"]
    parts = []
    for corpus, part in measured.groupby("corpus", sort=False):
        by = part.set_index("quantity")
        values = [f"{q} α = {_estimate(by.loc[q], 'alpha')}" for q in by.index]
        parts.append((f"{corpus}: {', '.join(values)}", len(values)))
    return (
        "Measured exponents against S of −log RBP_1 and the cross-entropy (a lognormal rank "
        f"distribution predicts nearly equal ones): {_first(parts)}."
    )


def extraction(runs: pd.DataFrame, entries: pd.DataFrame) -> str:
    """Notebook 05: the grid's runs (its runs table: models × corpora, scored tokens) and what the
    cache holds in all (its cache table: final models and checkpoints, new in this run)."""
    complete = entries[entries["complete"]]
    new = int(complete["new"].sum()) if "new" in complete else 0
    checkpoints = int(complete["revision"].notna().sum()) if "revision" in complete else 0
    # Tables differ by path: load_study's n_tokens, run_study's tokens and revision column.
    tokens = int(runs["n_tokens" if "n_tokens" in runs else "tokens"].sum()) if len(runs) else 0
    models = len(runs[[c for c in ("model", "revision") if c in runs]].drop_duplicates())
    corpora = runs["corpus"].nunique()
    held = f"{len(complete) - checkpoints} of final models, {checkpoints} of checkpoints"
    grid = f"{models} model{'' if models == 1 else 's'} × {corpora} {'corpus' if corpora == 1 else 'corpora'}"
    return (
        f"The grid's {len(runs)} runs ({grid}, {tokens:,} scored tokens) are in the cache; it holds "
        f"{len(complete)} complete entries in all ({held}), {new} new in this run."
    )


def training(joint: pd.DataFrame, synthetic: bool) -> str:
    """Notebook 06: the joint law's size and data exponents, with bootstrap intervals, of the
    first corpus's first RBP_k and of its CE (every corpus and quantity is in the table)."""
    corpus = joint["corpus"].iloc[0] if len(joint) else None
    rows = joint[joint["corpus"] == corpus]
    chosen = [rows.iloc[0]] if len(rows) else []
    ce = rows[rows["quantity"].astype(str).str.upper().str.contains("CE")]
    if len(ce) and ce.index[0] != rows.index[0]:
        chosen.append(ce.iloc[0])
    elif len(rows) > 1:
        chosen.append(rows.iloc[-1])
    parts = "; ".join(
        f"{r['quantity']}: α = {_estimate(r, 'alpha')}, β = {_estimate(r, 'beta')}" for r in chosen
    )
    rest = len(joint) - len(chosen)
    more = f" ({rest} more law{'s' if rest > 1 else ''} in the table)" if rest else ""
    lead = (
        "SYNTHETIC DATA (checkpoints drawn from a known law, not a model): "
        if synthetic
        else "On the scored checkpoints, "
    )
    return f"{lead}{JOINT_LAW} on {corpus} with {parts}{more}."


def decomposition(fits: pd.DataFrame) -> str:
    """Notebook 07: the exponents of CE and of its error entropy EE against S on the first corpus
    (SA, Conf and the other corpora are in the table), from `rbplab.study.decomposition.fits`."""
    parts = []
    for corpus, part in fits.groupby("corpus", sort=False):
        by = part.set_index("metric")
        terms = [
            f"{label} α = {_estimate(by.loc[m], 'alpha')}"
            for m, label in (("ce", "CE"), ("ee", "EE"))
            if m in by.index and pd.notna(by.loc[m, "alpha"])
        ]
        parts.append((f"{corpus}: {', '.join(terms)}", len(terms)))
    # Half the sentence's estimates: notebook 07 states its prediction audit after it.
    shown = _first(parts, limit=MAX_ESTIMATES // 2)
    return f"Cross-entropy split as CE = EE + SA − Conf, exponents against S: {shown}."


def prediction_audit(summary: pd.DataFrame, level: float = 0.95) -> str:
    """Notebook 07: how often the law fitted on the smaller models predicted the largest one
    within its prediction interval (`rbplab.analysis.fit.audit_summary`, by n_holdout and metric);
    more held-out sizes and the errors in half-widths are in the table."""
    if summary.empty:
        return "No prediction could be audited (too few model sizes)."
    names = {"rbp": "−log RBP_k", "ce": "CE", "ee": "EE", "ee_mm": "EE (Miller-Madow)", "mrr": "−log MRR"}
    n_out = int(summary["n_holdout"].min())
    part = summary[summary["n_holdout"] == n_out]
    held = "the largest size" if n_out == 1 else f"the {n_out} largest sizes"
    # Half the sentence's estimates (the decomposition states the other half): RBP_k and CE first.
    order = {"rbp": 0, "ce": 1}
    part = part.sort_values("metric", key=lambda m: m.map(lambda v: order.get(v, 2)), kind="stable")
    shown = part.head(MAX_ESTIMATES // 2)
    counts = ", ".join(
        f"{names.get(r['metric'], r['metric'])} {int(r['n_covered'])}/{int(r['n'])}"
        for _, r in shown.iterrows()
    )
    more = " (the other metrics and holdouts in the table)" if len(shown) < len(summary) else ""
    return f"Holding out {held}, predictions inside their {level:.0%} interval: {counts}{more}."
