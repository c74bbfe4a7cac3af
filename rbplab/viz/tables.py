"""Result tables for papers, now `rbplab.study.tables` (so `Study.to_markdown` can use them);
kept here so `from rbplab.viz import tables` still works."""

from rbplab.study.tables import (
    DROPPED,
    HEADERS_LATEX,
    HEADERS_MARKDOWN,
    INTERVAL_SUFFIXES,
    SYMMETRIC,
    formatted,
    interval_columns,
    latex_escape,
    to_latex,
    to_markdown,
    with_interval,
)

__all__ = [
    "DROPPED",
    "HEADERS_LATEX",
    "HEADERS_MARKDOWN",
    "INTERVAL_SUFFIXES",
    "SYMMETRIC",
    "formatted",
    "interval_columns",
    "latex_escape",
    "to_latex",
    "to_markdown",
    "with_interval",
]
