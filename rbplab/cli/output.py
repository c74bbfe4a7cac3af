"""What every `rbplab` command prints the same way: tables, and user errors in one line."""

from __future__ import annotations

import argparse

import pandas as pd

from rbplab.core.errors import RbplabError

# Errors a user can cause and fix, printed as one line: rbplab's own (`RbplabError`: every check
# of what the user passed, asked for or pointed at), and OSError, the machine's answer about files,
# disks, permissions and the network. Anything else (a ValueError from numpy, a KeyError, ...) is a
# bug and keeps its traceback (as does any error with --traceback).
USER_ERRORS: tuple[type[BaseException], ...] = (RbplabError, OSError)


def add_format_argument(p: argparse.ArgumentParser) -> None:
    """--format, which `print_table` takes."""
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")


def print_table(frame: pd.DataFrame, fmt: str = "table") -> None:
    """`frame` as csv, json records or an aligned table ("(none)" when empty)."""
    if fmt == "csv":
        print(frame.to_csv(index=False), end="")
    elif fmt == "json":
        print(frame.to_json(orient="records", date_format="iso", indent=1))
    elif frame.empty:
        print("(none)")
    else:
        print(frame.to_string(index=False))


def one_line(err: BaseException) -> str:
    """The message of `err` on one line (a KeyError's key said as 'not found')."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, KeyError):  # KeyError's str() is the repr of the key
        text = f"not found: {text}"
    return text
