"""rbplab.study.tables: Markdown and LaTeX tables with each estimate and its interval in one cell."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rbplab.study import size, synthetic_study, tables

FITS = pd.DataFrame(
    {
        "family": ["micro", "micro"],
        "corpus": ["legal_standin", "prose"],
        "k": [1, 100],
        "alpha": [0.036, 0.0384],
        "alpha_low": [0.030, 0.0316],  # symmetric: 0.036 ± 0.006
        "alpha_high": [0.042, 0.0452],  # symmetric: 0.0384 ± 0.0068
        "r2": [0.98386, np.nan],
        "n_models": [6, 6],
        "note": [None, "one model fewer"],
    }
)


def test_symmetric_and_asymmetric_intervals():
    assert tables.with_interval(0.036, 0.030, 0.042) == "0.036 ± 0.006"
    assert tables.with_interval(0.036, 0.030, 0.043) == "0.036 [0.030, 0.043]"  # a bootstrap interval
    assert tables.with_interval(0.036, 0.030, 0.042, latex=True) == r"0.036 \pm 0.006"
    assert tables.with_interval(0.036, np.nan, 0.042) == "0.036"
    assert tables.with_interval(1.23456, 1.0, 1.5, digits=2) == "1.23 [1.00, 1.50]"


def test_markdown_table():
    text = tables.to_markdown(FITS)
    lines = text.strip().splitlines()
    assert lines[0] == "| family | corpus | k | α | R² | models |"
    assert lines[1] == "|---|---|---:|---:|---:|---:|"
    assert lines[2] == "| micro | legal_standin | 1 | 0.036 ± 0.006 | 0.984 | 6 |"
    assert lines[3] == "| micro | prose | 100 | 0.038 ± 0.007 | n/a | 6 |"
    assert len(lines) == 4  # the note column and the bounds are not columns of their own


def test_latex_table_escapes_text_and_typesets_numbers():
    text = tables.to_latex(FITS, caption="Fits of -log RBP_k (95% CI)", label="tab:fits")
    assert r"\begin{table}" in text and r"\caption{Fits of -log RBP\_k (95\% CI)}" in text
    assert r"\label{tab:fits}" in text and r"\toprule" in text and r"\bottomrule" in text
    assert r"family & corpus & $k$ & $\alpha$ & $R^2$ & models \\" in text
    assert r"micro & legal\_standin & $1$ & $0.036 \pm 0.006$ & $0.984$ & $6$ \\" in text
    assert r"\begin{tabular}{llrrrr}" in text
    bare = tables.to_latex(FITS)
    assert bare.startswith(r"\begin{tabular}") and r"\begin{table}" not in bare


def test_other_interval_suffixes_and_a_study_table():
    joint = pd.DataFrame({"quantity": ["CE"], "beta": [0.31], "beta_low": [0.2], "beta_high": [0.5]})
    assert tables.to_markdown(joint).splitlines()[2] == "| CE | 0.310 [0.200, 0.500] |"
    fits = size.fit_table(synthetic_study(n_tokens=2000, corpora=("a",)), [1, 10])
    lines = tables.to_markdown(fits).strip().splitlines()
    assert len(lines) == 2 + len(fits)
    row = fits.iloc[1]
    half = (row["alpha_high"] - row["alpha_low"]) / 2  # OLS t-intervals are symmetric
    assert f"| {row['alpha']:.3f} ± {half:.3f} |" in lines[3]
