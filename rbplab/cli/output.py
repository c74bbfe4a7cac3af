"""What the command line prints: one-line errors, tables in the format asked for, sizes and counts.

Sizes and durations as the command line prints them (`cache ls`, `plan`).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from rbplab.core.errors import RbplabError

if TYPE_CHECKING:
    import pandas as pd

# Errors a user can cause and fix, printed as one line: rbplab's own (`RbplabError`: every check
# of what the user passed, asked for or pointed at), and OSError, the machine's answer about files,
# disks, permissions and the network. Anything else (a ValueError from numpy, a KeyError, ...) is a
# bug and keeps its traceback (as does any error with --traceback).
USER_ERRORS: tuple[type[BaseException], ...] = (RbplabError, OSError)


FORMATS = ("table", "csv", "json")
FORMAT_HELP = "table to read (sizes rounded), or csv or json with every column and exact numbers"


def add_format_argument(p: argparse.ArgumentParser) -> None:
    """--format, which `print_table` takes."""
    p.add_argument("--format", choices=FORMATS, default="table", help=FORMAT_HELP)


def print_table(frame: pd.DataFrame, fmt: str = "table") -> None:
    """`frame` as csv, json records or the one table display of terminal, lab and report
    (`rbplab.viz.readable.text`: readable headers, one notation per column, "(none)" when empty)."""
    if fmt == "csv":
        print(frame.to_csv(index=False), end="")
    elif fmt == "json":
        print(frame.to_json(orient="records", date_format="iso", indent=1))
    else:
        from rbplab.viz.readable import text  # no plotly: the display module is pandas alone

        print(text(frame))


def one_line(err: BaseException) -> str:
    """The message of `err` on one line (a KeyError's key said as 'not found')."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, KeyError):  # KeyError's str() is the repr of the key
        text = f"not found: {text}"
    return text


def human_bytes(n: float) -> str:
    """Bytes in binary units (1 KiB = 1,024 B): "512 B", "1.5 MiB", "56.0 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float | None) -> str:
    """ "42.0 s", "3.5 min", "6.37 h"; "-" when unknown."""
    if s is None or not math.isfinite(s):
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"
