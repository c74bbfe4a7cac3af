"""Tables as people read them, one display for the lab, the report and the terminal:
`text_table` turns a result table (as the notebooks compute it and the report saves it as CSV,
full precision) into text cells with `rbplab.core.display`'s numbers: an estimate and its
interval columns as one "0.123 [0.101, 0.145]" column, sizes as 85.1M, whole numbers with
thousands separators, each other column in one notation (`rbplab.core.display.column`), and
columns with nothing to say left out. `header` names each column for a reader (α, R²); the
identifier stays where a user needs it: the tooltip of an HTML header, the legend under a text
table. The notebooks show their tables through `readable`, the report's index its headline
tables through `table_html`, and a command line prints `text(frame)`.
"""

from __future__ import annotations

import html
import re

import pandas as pd

from rbplab.core.display import MISSING, column, intervals, size

# Parameter and token counts: S and its range, the compute-optimal S, tokens seen D.
SIZE_COLUMN = re.compile(r"(S|D)(_min|_max)?|(.+_)?S_opt")
LOW, HIGH = "_low", "_high"


BOOT = "_boot"  # X_boot_low, X_boot_high: X's bootstrap interval


def interval_columns(frame: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The columns X of `frame` that come with an interval, X_low and X_high, else (a bootstrap
    table) X_boot_low and X_boot_high: X and the names of its interval's ends."""
    out = {}
    for name in frame.columns:
        for infix in ("", BOOT):
            ends = (f"{name}{infix}{LOW}", f"{name}{infix}{HIGH}")
            if name not in out and all(e in frame.columns for e in ends):
                out[name] = ends
    return out


def text_table(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as text, one column per quantity (still named by its identifier): each estimate X
    with its interval (X_low, X_high, or X_boot_low, X_boot_high) in one column, sizes (S, D,
    S_min, ...) as 85.1M, other columns by `rbplab.core.display.column` (one notation each),
    missing values as "n/a", and a column missing or blank in every row left out (06's `note`).
    The index is dropped (the notebooks number their rows 0, 1, ...: it says nothing).

    Examples
    --------
    >>> frame = pd.DataFrame({"corpus": ["prose"], "S": [25472.0], "alpha": [0.04231],
    ...                       "alpha_low": [0.0301], "alpha_high": [0.0544], "n_models": [6]})
    >>> text_table(frame).to_dict("records")
    [{'corpus': 'prose', 'S': '25.5K', 'alpha': '0.0423 [0.0301, 0.0544]', 'n_models': '6'}]
    """
    merged = interval_columns(frame)
    dropped = {end for ends in merged.values() for end in ends}
    out = {}
    for name in frame.columns:
        values = frame[name]
        if name in dropped or _blank(values):
            continue
        if name in merged:
            low, high = merged[name]
            out[name] = intervals(*(_floats(frame[c]) for c in (name, low, high)))
        elif isinstance(name, str) and SIZE_COLUMN.fullmatch(name) and pd.api.types.is_numeric_dtype(values):
            out[name] = [size(v) for v in values]
        else:
            out[name] = column(values.tolist())
    return pd.DataFrame(out, columns=list(out), index=pd.RangeIndex(len(frame)))


def _blank(values: pd.Series) -> bool:
    """Whether a column says nothing: missing or empty text in every row."""
    return bool(values.map(lambda v: pd.isna(v) or (isinstance(v, str) and not v.strip())).all())


# Identifiers spelled out word by word (`header`), and whole identifiers read otherwise.
_WORDS = {
    "alpha": "α", "beta": "β", "mu": "μ", "sigma": "σ", "r2": "R²", "se": "SE", "sd": "SD",
    "loo": "leave-one-out", "boot": "bootstrap", "ce": "CE", "ee": "EE", "sa": "SA", "mm": "Miller-Madow",
    "rbp": "RBP", "rbe": "RBE", "mrr": "MRR", "conf": "Conf", "log": "log", "opt": "optimal",
}  # fmt: skip
_HEADERS = {
    "n_models": "models", "n_tokens": "tokens", "n_docs": "documents", "n_boot": "resamples",
    "n_boot_valid": "resamples fitted", "n_fit": "models fitted", "n_rbe": "distinct RBE values",
    "ee_mm": "EE (Miller-Madow)", "mean_p": "mean p", "S_min": "S min", "S_max": "S max",
}  # fmt: skip


_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*")
_AT_K = re.compile(r"^k(\d+)$")  # alpha_k100: α at k = 100


def header(name: object) -> str:
    """A column's identifier as a reader's header: alpha_loo_min as "α leave-one-out min", r2 as
    "R²", n_models as "models", rbp_1 as "RBP_1", alpha_k100 as "α (k = 100)" (the identifier
    itself when no word of it is known to read otherwise, or when it is no identifier).

    Examples
    --------
    >>> [header(c) for c in ("alpha_loo_min", "r2_boot_median", "n_rbe", "rbp_1", "alpha_k100")]
    ['α leave-one-out min', 'R² bootstrap median', 'distinct RBE values', 'RBP_1', 'α (k = 100)']
    """
    text = str(name)
    if text in _HEADERS:
        return _HEADERS[text]
    if not _IDENTIFIER.fullmatch(text):
        return text  # written for readers already (04's "alpha -log RBP_1 (empirical)")
    words = text.split("_")
    if len(words) == 2 and words[0] in _WORDS and words[1].isdigit():
        return f"{_WORDS[words[0]]}_{words[1]}"  # a quantity at a k: RBP_1
    return " ".join(_AT_K.sub(r"(k = \1)", _WORDS.get(w, w)) for w in words)


def text(frame: pd.DataFrame) -> str:
    """`frame` as the terminal shows it: `text_table` under readable headers, aligned, and a
    legend naming the identifier of each column whose header reads otherwise ("(none)" when the
    table is empty)."""
    shown = text_table(frame)
    if shown.empty:
        return "(none)"
    headers = {name: header(name) for name in shown.columns}
    body = shown.rename(columns=headers).to_string(index=False)
    renamed = [f"{h} = {name}" for name, h in headers.items() if h != str(name)]
    return body + (f"\ncolumns: {', '.join(renamed)}" if renamed else "")


def _floats(values: pd.Series) -> list[float | None]:
    return [None if pd.isna(v) else float(v) for v in values]


def table_html(frame: pd.DataFrame, classes: str | None = None) -> str:
    """`text_table(frame)` as an HTML table without its index, under readable headers whose
    tooltip (title) is the column's identifier."""
    shown = text_table(frame)
    table = shown.to_html(index=False, border=0, classes=classes, na_rep=MISSING)
    head, rest = table.split("</thead>", 1) if "</thead>" in table else (table, "")
    for name in shown.columns:
        cell = f"<th>{html.escape(str(name))}</th>"
        titled = f'<th title="{html.escape(str(name))}">{html.escape(header(name))}</th>'
        head = head.replace(cell, titled, 1)
    return head + ("</thead>" + rest if rest else "")


class Readable:
    """A table shown as `text_table` shows it: in a notebook (and so on its report page) an HTML
    table in a box that scrolls sideways when it is wider than the page, never cut at its edge.
    `frame` keeps the numbers."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def _repr_html_(self) -> str:
        # One line per cell (an interval wrapped over three lines read as three numbers); the
        # box scrolls instead.
        style = "<style>.rbplab-table td, .rbplab-table th { white-space: nowrap; }</style>"
        box = "overflow-x: auto; max-width: 100%;"
        return f'{style}<div class="rbplab-table" style="{box}">{table_html(self.frame)}</div>'

    def __repr__(self) -> str:
        return text(self.frame)


def readable(frame: pd.DataFrame) -> Readable:
    """`frame` to be shown as people read it (the last line of a notebook cell): `Readable`."""
    return Readable(frame)
