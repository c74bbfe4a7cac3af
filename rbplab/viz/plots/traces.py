"""What every figure builder shares: column checks, number formats, the traces they draw (markers,
lines, interval bands, error bars), shapes placed on a panel, and the subplot grid.

The builders collect (trace, row, col) triples and add them with `add_pending` in one call: adding
traces one by one re-validates the figure each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from rbplab.core.errors import InvalidArgumentError

S_TITLE = "non-embedding parameters S"
NEG_LOG_RBP = "−log RBP<sub>k</sub>"


def probability_axis(log: bool) -> dict:
    """The axis settings of a probability: its range never past 1. `maxallowed` is in the units
    of the axis' range (log10 on a log axis); plotly keeps autorange, zoom and pan under it, and
    `rbplab.viz.states.fit_axes` the explorer's ranges (03's p axis ran to ~5 at k = 4,096)."""
    return {"maxallowed": 0.0 if log else 1.0}


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise a one-line InvalidArgumentError naming the columns `frame` (a `what` frame) lacks."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidArgumentError(f"{what} frame lacks columns {missing}; it has {list(frame.columns)}")


def format_k(k: float) -> str:
    """k as a panel title or legend states it: 1, 1,000, 2.5."""
    return f"{int(k):,}" if float(k).is_integer() else f"{k:g}"


def grid_note(frame: pd.DataFrame) -> str:
    """What a figure of `frame` was measured on, for its caption: "prose, humaneval · micro,
    6 models" (the corpora, the families and how many models, from the columns it has)."""

    def distinct(column: str) -> list[str]:
        return [str(v) for v in dict.fromkeys(frame[column].dropna())] if column in frame.columns else []

    corpora, families = distinct("corpus"), distinct("family")
    if "model" in frame.columns:
        n_models = frame["model"].nunique()
    elif "n_models" in frame.columns and frame["n_models"].notna().any():
        n_models = int(frame["n_models"].max())
    else:  # S alone may be a selection (the audit's held-out sizes): no count
        n_models = 0
    grid = ", ".join(families + ([f"{n_models} models"] if n_models else []))
    return " · ".join(part for part in (", ".join(corpora), grid) if part)


def with_interval(row: pd.Series | dict, name: str, digits: int = 3) -> str:
    """ "0.036 [0.030, 0.043]": a value with its interval when the row has one."""
    value = row[name]
    lo, hi = row.get(f"{name}_low"), row.get(f"{name}_high")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def error_bars(frame: pd.DataFrame, value: str, low: str, high: str) -> dict | None:
    """Asymmetric error bars from interval columns, or None when the frame has none."""
    if not {low, high} <= set(frame.columns):
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (frame[high] - frame[value]).to_numpy(),
        "arrayminus": (frame[value] - frame[low]).to_numpy(),
    }


def add_pending(fig: go.Figure, pending: list) -> None:
    """Add collected (trace, row, col) in one call (adding them one by one re-validates the figure each
    time, which made widget callbacks sluggish)."""
    if pending:
        traces, rows, cols = zip(*pending, strict=True)
        fig.add_traces(list(traces), rows=list(rows), cols=list(cols))


def marker_trace(
    x: Any, y: Any, colour: str, name: str, group: str, meta: str, size: int | None = None
) -> go.Scatter:
    """Measured points in `colour`, in legend group `group`; `meta` says what they are."""
    marker = {"color": colour} | ({"size": size} if size else {})
    return go.Scatter(x=x, y=y, mode="markers", marker=marker, name=name, legendgroup=group, meta=meta)


def line_trace(
    x: Any, y: Any, colour: str, name: str, group: str, meta: str, dash: str | None = None
) -> go.Scatter:
    """A curve in `colour` (dashed or dotted when `dash`), in legend group `group`."""
    line = {"color": colour} | ({"dash": dash} if dash else {})
    return go.Scatter(x=x, y=y, mode="lines", line=line, name=name, legendgroup=group, meta=meta)


def marked_line_trace(
    x: Any, y: Any, colour: str, name: str, group: str, meta: str, size: int | None = None
) -> go.Scatter:
    """A curve in `colour` through its points, marked (`size`, or plotly's default marker), in
    legend group `group`."""
    marker = {"size": size} if size else None
    return go.Scatter(
        x=x,
        y=y,
        mode="lines+markers",
        line={"color": colour},
        marker=marker,
        name=name,
        legendgroup=group,
        meta=meta,
    )


def band_trace(x: Any, low: Any, high: Any, colour: str, name: str, group: str, meta: str) -> go.Scatter:
    """A faint filled interval between `low` and `high` over `x` (x sorted), kept out of the legend."""
    x, low, high = np.asarray(x), np.asarray(low), np.asarray(high)
    return go.Scatter(
        x=np.r_[x, x[::-1]],
        y=np.r_[high, low[::-1]],
        fill="toself",
        fillcolor=colour,
        opacity=0.15,
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        name=name,
        legendgroup=group,
        meta=meta,
    )


def axis_refs(index: int) -> tuple[str, str]:
    """The references (x axis, y domain) a shape or annotation uses to sit on panel `index`."""
    suffix = "" if index == 1 else str(index)
    return f"x{suffix}", f"y{suffix} domain"


def _panel_span(index: int, kind: str, x0: float, x1: float, **style: Any) -> dict:
    """A shape of `kind` ("line", "rect") from x0 to x1 over the full height of panel `index`
    (1-based, row-major), drawn with `style` (line, fillcolor, layer)."""
    xref, yref = axis_refs(index)
    return {"type": kind, "xref": xref, "yref": yref, "x0": x0, "x1": x1, "y0": 0, "y1": 1, **style}


def vline(index: int, x: float, colour: str = "grey", dash: str = "dot", width: float = 1) -> dict:
    """A vertical line over the full height of panel `index`."""
    return _panel_span(index, "line", x, x, line={"color": colour, "dash": dash, "width": width})


def vrect(index: int, x0: float, x1: float, colour: str) -> dict:
    """A shaded band over the full height of panel `index`, below the data."""
    return _panel_span(index, "rect", x0, x1, fillcolor=colour, line={"width": 0}, layer="below")


# Empty grids by their arguments and the default template: make_subplots takes ~11 ms, a copy of
# its figure (grid included) under 1 ms, and an offline explorer draws hundreds of figures.
_GRIDS: dict[str, go.Figure] = {}


def subplots(rows: int, cols: int, **kwargs: Any) -> go.Figure:
    """An empty rows x cols figure whose panels `rbplab.viz.layout.arrange` places."""
    key = repr((rows, cols, sorted(kwargs.items()), pio.templates.default))
    grid = _GRIDS.get(key)
    if grid is None:
        # Spacing and titles are set in pixels by `arrange`; make_subplots only creates the axes.
        grid = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.02, vertical_spacing=0.02, **kwargs)
        _GRIDS[key] = grid
    return go.Figure(grid)
