"""Tables as people read them: `text_table` turns a result table (as the notebooks compute it
and the report saves it as CSV, full precision) into text cells with `rbplab.core.display`'s
numbers: an estimate and its interval columns as one "0.123 [0.101, 0.145]" column, sizes as
85.1M, whole numbers with thousands separators, 3 significant digits otherwise. The notebooks
show their tables through `readable` and the report's index its headline tables through
`table_html`.
"""

from __future__ import annotations

import re

import pandas as pd

from rbplab.core.display import MISSING, interval, number, size

# Parameter and token counts: S and its range, the compute-optimal S, tokens seen D.
SIZE_COLUMN = re.compile(r"(S|D)(_min|_max)?|(.+_)?S_opt")
LOW, HIGH = "_low", "_high"


BOOT = "_boot"  # X_boot_low, X_boot_high: X's bootstrap interval


def interval_columns(frame: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The columns X of `frame` that come with an interval, X_low and X_high, else (a bootstrap
    table) X_boot_low and X_boot_high: X and the names of its interval's ends."""
    out = {}
    for column in frame.columns:
        for infix in ("", BOOT):
            ends = (f"{column}{infix}{LOW}", f"{column}{infix}{HIGH}")
            if column not in out and all(e in frame.columns for e in ends):
                out[column] = ends
    return out


def text_table(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as text, one column per quantity: each estimate X with its interval (X_low, X_high,
    or X_boot_low, X_boot_high) in one column, sizes (S, D, S_min, ...) as 85.1M, other numbers
    by `rbplab.core.display.number`, missing values as "n/a", and a column missing in every row
    left out. The index is dropped (the notebooks number their rows 0, 1, ...: it says nothing).

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
    for column in frame.columns:
        if column in dropped or frame[column].isna().all():
            continue
        values = frame[column]
        if column in merged:
            low, high = merged[column]
            rows = zip(values, frame[low], frame[high], strict=True)
            out[column] = [interval(*_floats(v, lo, hi)) for v, lo, hi in rows]
        elif (
            isinstance(column, str)
            and SIZE_COLUMN.fullmatch(column)
            and pd.api.types.is_numeric_dtype(values)
        ):
            out[column] = [size(v) for v in values]
        else:
            out[column] = [number(v) for v in values]
    return pd.DataFrame(out, columns=list(out), index=pd.RangeIndex(len(frame)))


def _floats(*values: object) -> list[float | None]:
    return [None if pd.isna(v) else float(v) for v in values]


def table_html(frame: pd.DataFrame, classes: str | None = None) -> str:
    """`text_table(frame)` as an HTML table without its index."""
    return text_table(frame).to_html(index=False, border=0, classes=classes, na_rep=MISSING)


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
        return text_table(self.frame).to_string(index=False)


def readable(frame: pd.DataFrame) -> Readable:
    """`frame` to be shown as people read it (the last line of a notebook cell): `Readable`."""
    return Readable(frame)
