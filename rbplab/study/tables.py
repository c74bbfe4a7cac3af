"""Result tables for papers: Markdown and LaTeX with each estimate and its interval in one cell.

Takes the tidy tables the study produces (`size.fit_table`, `size.fits`, `distribution.ce_exponents`,
`emergence.fits`, `data_scaling.data_fits`, the joint-law rows, ...): every column `x` that
comes with `x_low`/`x_high` is printed as "0.036 ± 0.006" when its
interval is symmetric (an OLS t-interval) and as "0.036 [0.030, 0.043]" when it is not (a
bootstrap percentile interval); the bound columns are dropped. Known column names get their
symbols (alpha -> α, r2 -> R²). Nothing is computed here beyond formatting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

SYMMETRIC = 0.02  # an interval whose halves differ by less than this share is printed as ± half-width
DROPPED = ("note", "ties", "alpha_se", "alpha_jackknife_se", "residual_sd", "prefactor", "vocab_size")

HEADERS_MARKDOWN = {
    "alpha": "α",
    "beta": "β",
    "r2": "R²",
    "n_models": "models",
    "alpha_token": "α (token)",
    "alpha_joint": "α (joint)",
    "r2_joint": "R² (joint)",
    "mu": "μ",
    "sigma": "σ",
    "mu_over_sigma": "μ/σ",
}
HEADERS_LATEX = {
    "alpha": r"$\alpha$",
    "beta": r"$\beta$",
    "r2": r"$R^2$",
    "n_models": "models",
    "alpha_token": r"$\alpha$ (token)",
    "alpha_joint": r"$\alpha$ (joint)",
    "r2_joint": r"$R^2$ (joint)",
    "mu": r"$\mu$",
    "sigma": r"$\sigma$",
    "mu_over_sigma": r"$\mu/\sigma$",
    "k": "$k$",
    "S": "$S$",
    "N": "$N$",
}


def interval_columns(frame: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """{value column: (low column, high column)} for every value the frame gives an interval."""
    return {
        column: (f"{column}_low", f"{column}_high")
        for column in frame.columns
        if f"{column}_low" in frame.columns and f"{column}_high" in frame.columns
    }


def _number(value: object, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)) or pd.isna(value):
        return "n/a"
    if isinstance(value, (int,)) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    return f"{float(value):.{digits}f}" if abs(float(value)) >= 10**-digits else f"{float(value):.{digits}g}"


def with_interval(value: float, low: float, high: float, digits: int = 3, latex: bool = False) -> str:
    """ "0.036 ± 0.006" for a symmetric interval, "0.036 [0.030, 0.043]" otherwise; the value
    alone when a bound is missing."""
    if any(pd.isna(v) for v in (low, high)):
        return _number(value, digits)
    below, above = value - low, high - value
    half = (below + above) / 2
    if half > 0 and abs(below - above) <= SYMMETRIC * half:
        pm = r" \pm " if latex else " ± "
        return f"{value:.{digits}f}{pm}{half:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def formatted(frame: pd.DataFrame, digits: int = 3, latex: bool = False) -> pd.DataFrame:
    """`frame` as text cells: estimates merged with their intervals, integers with separators,
    other numbers to `digits` decimals; bound columns and bookkeeping columns dropped."""
    intervals = interval_columns(frame)
    bounds = {c for pair in intervals.values() for c in pair}
    out = {}
    for column in frame.columns:
        if column in bounds or column in DROPPED:
            continue
        values = frame[column]
        if column in intervals:
            low, high = intervals[column]
            out[column] = [
                with_interval(v, lo, hi, digits, latex)
                for v, lo, hi in zip(values, frame[low], frame[high], strict=True)
            ]
        elif pd.api.types.is_integer_dtype(values) or column in ("k", "N", "n_models", "n", "n_tokens"):
            out[column] = [_count(v) for v in values]
        elif pd.api.types.is_float_dtype(values):
            out[column] = [_number(v, digits) for v in values]
        else:
            out[column] = ["" if pd.isna(v) else str(v) for v in values]
    return pd.DataFrame(out, index=frame.index)


def _count(value: object) -> str:
    return "n/a" if pd.isna(value) else f"{int(value):,}"


def _headers(columns: Sequence[str], names: dict[str, str]) -> list[str]:
    return [names.get(c, c) for c in columns]


def to_markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table of `frame` (see the module docstring).

    Examples
    --------
    >>> from rbplab.study import size, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> print(to_markdown(size.fit_table(study, [1])))
    | family | corpus | k | α | R² | models |
    |---|---|---:|---:|---:|---:|
    | synthetic | synthetic-a | 1 | 0.080 ± 0.012 | 0.989 | 6 |
    | synthetic | synthetic-b | 1 | 0.069 ± 0.008 | 0.993 | 6 |
    <BLANKLINE>
    """
    cells = formatted(frame, digits)
    header = _headers(list(cells.columns), HEADERS_MARKDOWN)
    numeric = [_is_numeric(frame, c) for c in cells.columns]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if n else "---" for n in numeric) + "|",
    ]
    for row in cells.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def _is_numeric(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and pd.api.types.is_numeric_dtype(frame[column])


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(
    frame: pd.DataFrame,
    digits: int = 3,
    *,
    caption: str | None = None,
    label: str | None = None,
) -> str:
    """A LaTeX table (booktabs rules) of `frame`; estimates with intervals are typeset in math
    mode ($0.036 \\pm 0.006$), text is escaped. With a caption or label it is wrapped in a
    `table` float."""
    cells = formatted(frame, digits, latex=True)
    intervals = interval_columns(frame)
    columns = list(cells.columns)
    align = "".join("r" if _is_numeric(frame, c) else "l" for c in columns)
    header = " & ".join(HEADERS_LATEX.get(c, latex_escape(c)) for c in columns) + r" \\"
    body = []
    for row in cells.itertuples(index=False):
        out = []
        for column, value in zip(columns, row, strict=True):
            if column in intervals or (_is_numeric(frame, column) and value != "n/a"):
                out.append(f"${value.replace(',', '{,}')}$")
            else:
                out.append(latex_escape(str(value)))
        body.append(" & ".join(out) + r" \\")
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\toprule", header, r"\midrule", *body, r"\bottomrule"]
    lines.append(r"\end{tabular}")
    if caption is not None or label is not None:
        inner = [r"\begin{table}", r"\centering"]
        if caption is not None:
            inner.append(rf"\caption{{{latex_escape(caption)}}}")
        if label is not None:
            inner.append(rf"\label{{{label}}}")
        lines = [*inner, *lines, r"\end{table}"]
    return "\n".join(lines) + "\n"
