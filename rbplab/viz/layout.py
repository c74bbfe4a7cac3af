"""Page geometry shared by every figure: a fixed width that fits a 1,000 px screen, panels placed
in pixels, titles that never run into each other, legends that are never cut, and colours that
say what they encode (a sequential scale for sizes and other ordered values).

plotly places subplots by fractions of the plotting area and never checks that one panel's title
or tick labels fit beside the next; `arrange` therefore lays a grid out in pixels (gaps for tick
labels and titles, margins for the legend rows it needs) and converts to fractions last. The
sizes of text are estimated from the number of characters (`text_width`), which is all a layout
test can read as well.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative, sample_colorscale

WIDTH = 960  # px: every figure fits a 1,000 px wide screen or report column
MAX_HEIGHT = 800  # px: and a laptop screen's height
FONT_SIZE = 12
CHAR_WIDTH = 0.56  # glyph width of plotly's sans-serif font, in font sizes: measured ~0.48, with room
LEGEND_ROW = 22  # px per legend entry (vertical) or row (horizontal)
LEGEND_SWATCH = 56  # px a legend entry takes besides its text (symbol, gap and padding)
TICK_ROOM = 24  # px below a panel for its x tick labels
AXIS_TITLE_ROOM = 26  # px for an axis title beyond its tick labels
PANEL_TITLE_ROOM = 24  # px above a panel for its title
Y_TICK_ROOM = 48  # px left of a panel for its y tick labels

TEMPLATE = pio.templates["plotly_white"]  # looked up once: by name it is rebuilt per figure
# Validating a template takes plotly ~15 ms a figure; a view redrawing the figure it shows keeps
# the template it has (`untemplated`), so a slider step does not pay it again.
_TEMPLATED: contextvars.ContextVar[bool] = contextvars.ContextVar("rbplab_templated", default=True)
CATEGORICAL = qualitative.Plotly + qualitative.D3  # unordered things: families, corpora
SIZE_SCALE = "Viridis"  # ordered things (model size S, sequence length N), dark to light
SCALE_END = 0.85  # Viridis' last 15 % is a yellow too pale for lines on white
EMPTY = [None]  # data of a legend-only key trace

_TAG = re.compile(r"<[^>]+>")
# TeX-like notation people write in titles, and its plotly HTML: p_{N,k}, RBP_1, p_(N=10, k=5), S^-α.
_BRACED = re.compile(r"([_^])\{([^{}]*)\}")
_SUBSCRIPT = re.compile(r"\b(RBP|p|L)_(\([^()]*\)|[A-Za-z0-9]+)")
_SUPERSCRIPT = re.compile(r"\^([-−]?[A-Za-z0-9αβ]+)")


@contextlib.contextmanager
def untemplated() -> Iterator[None]:
    """Figures made in this block get no template (not ours, and not plotly's default either:
    plotly gives every new figure its default template): for redrawing a figure that already has
    one, whose template `rbplab.viz.widgets.sync_figure(..., keep_template=True)` keeps."""
    token = _TEMPLATED.set(False)
    default = pio.templates.default
    pio.templates.default = "none"
    try:
        yield
    finally:
        pio.templates.default = default
        _TEMPLATED.reset(token)


def html_label(text: str | None) -> str:
    """`text` with TeX-like sub- and superscripts (p_{N,k}, RBP_1, S^-α) in plotly's HTML
    (p<sub>N,k</sub>), which every renderer shows without MathJax; `$` signs are dropped."""
    if not text:
        return text or ""
    text = text.replace("$", "")
    text = _BRACED.sub(
        lambda m: f"<{'sub' if m[1] == '_' else 'sup'}>{m[2]}</{'sub' if m[1] == '_' else 'sup'}>", text
    )
    text = _SUBSCRIPT.sub(lambda m: f"{m[1]}<sub>{m[2].strip('()')}</sub>", text)
    return _SUPERSCRIPT.sub(lambda m: f"<sup>{m[1].replace('-', '−')}</sup>", text)


def plain_text(text: str | None) -> str:
    """`text` as it reads on screen: HTML tags (<sub>, <br>, ...) dropped."""
    return _TAG.sub("", text or "")


def text_width(text: str | None, size: float = FONT_SIZE) -> float:
    """Estimated width in px of one line of `text` (the longest, for several lines)."""
    lines = re.split(r"<br\s*/?>", text or "", flags=re.IGNORECASE)
    return max(len(plain_text(line)) for line in lines) * size * CHAR_WIDTH


def categorical(i: int) -> str:
    return CATEGORICAL[i % len(CATEGORICAL)]


def sequential(values: Sequence[float], *, log: bool = True) -> dict[float, str]:
    """A colour per distinct value on the sequential scale, ordered: the smallest value darkest.
    Positions follow log(value) (sizes span decades) unless `log` is False."""
    distinct = sorted({float(v) for v in values})
    if not distinct:
        return {}
    x = np.log(distinct) if log and distinct[0] > 0 else np.asarray(distinct, dtype=float)
    span = x[-1] - x[0]
    positions = (x - x[0]) / span * SCALE_END if span > 0 else np.zeros(len(x))
    colours = sample_colorscale(SIZE_SCALE, [float(p) for p in positions])
    return dict(zip(distinct, colours, strict=True))


def legend_key(name: str, *, mode: str, dash: str = "solid", opacity: float = 1.0, group: str | None = None):
    """A legend-only trace that explains a line or marker style (grey, no data)."""
    return go.Scatter(
        x=EMPTY,
        y=EMPTY,
        mode=mode,
        name=name,
        line={"color": "#555", "dash": dash},
        marker={"color": "#555", "size": 8},
        opacity=opacity,
        legendgroup=group or f"key:{name}",
        legendrank=2000,
        hoverinfo="skip",
        meta="key",
    )


@dataclass(frozen=True)
class Grid:
    """How panels are laid out: rows x cols, each row `panel_height` px when the page allows.
    shared_x: only the bottom row shows x tick labels (the columns share their x axis)."""

    rows: int = 1
    cols: int = 1
    panel_height: int = 300
    shared_x: bool = False
    per_axis_y_titles: bool = False  # each panel names its own y quantity (a wider gap)


def _legend_entries(fig: go.Figure) -> list[str]:
    entries = []
    for trace in fig.data:
        shown = trace.showlegend
        if shown is False or not trace.name:
            continue
        if shown is None and len(fig.data) == 1:
            continue  # plotly hides the legend of a one-trace figure
        entries.append(trace.name)
    return entries


def legend_rows(entries: Sequence[str], available: float) -> tuple[int, float]:
    """(rows, text width in px) of a horizontal legend of `entries` in `available` px: every
    entry's text gets the width of the longest (plotly's `entrywidth`), so the rows are predictable."""
    if not entries:
        return 0, 0.0
    text = min(available - LEGEND_SWATCH, max(text_width(e) for e in entries))
    per_row = max(1, int(available // (text + LEGEND_SWATCH)))
    return math.ceil(len(entries) / per_row), text


def arrange(
    fig: go.Figure,
    grid: Grid,
    *,
    title: str,
    subtitle: str | None = None,
    panel_titles: Sequence[str] | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    legend: str = "bottom",
    colorbar: bool = False,
) -> go.Figure:
    """Give `fig` (made by make_subplots with grid.rows x grid.cols, or one panel) the shared page
    geometry: WIDTH px wide, at most MAX_HEIGHT px high (panels shrink to fit), each panel's title
    above it, one x title under the grid and one y title left of it (or the axes' own titles
    when `grid.per_axis_y_titles`), and the legend below the grid ("bottom", horizontal, as many
    rows as its entries need) or right of it ("right"). Returns `fig`."""
    rows, cols = grid.rows, grid.cols
    entries = _legend_entries(fig) if legend != "none" else []
    titled = y_title or grid.per_axis_y_titles or _has_axis_titles(fig, "y")
    left = Y_TICK_ROOM + (AXIS_TITLE_ROOM if titled else 0) + 8
    right = 16 + (90 if colorbar else 0)
    legend_width = 0.0
    if entries and legend == "right":
        legend_width = max(text_width(e) for e in entries) + LEGEND_SWATCH
        right += legend_width
    plot_width = WIDTH - left - right
    hgap = Y_TICK_ROOM + (AXIS_TITLE_ROOM if grid.per_axis_y_titles else 0) + 12
    vgap = (PANEL_TITLE_ROOM if panel_titles else 8) + (8 if grid.shared_x else TICK_ROOM + 8)
    below = TICK_ROOM + (AXIS_TITLE_ROOM if x_title or _has_axis_titles(fig, "x") else 0)
    n_rows, entry_text = legend_rows(entries, WIDTH - 16) if legend == "bottom" else (0, 0.0)
    top = 44 + (20 if subtitle else 0) + (PANEL_TITLE_ROOM if panel_titles else 8)
    bottom = below + (n_rows * LEGEND_ROW + 16 if n_rows else 12)
    panel_height = grid.panel_height
    fixed = top + bottom + (rows - 1) * vgap
    if fixed + rows * panel_height > MAX_HEIGHT:
        panel_height = max(80, (MAX_HEIGHT - fixed) // rows)
    plot_height = rows * panel_height + (rows - 1) * vgap
    panel_width = (plot_width - (cols - 1) * hgap) / cols

    annotations = [a for a in fig.layout.annotations if a.name not in ("panel title", "x title", "y title")]
    for r in range(rows):
        for c in range(cols):
            index = r * cols + c + 1
            suffix = "" if index == 1 else str(index)
            x0 = c * (panel_width + hgap) / plot_width
            x1 = x0 + panel_width / plot_width
            y1 = 1 - r * (panel_height + vgap) / plot_height
            y0 = y1 - panel_height / plot_height
            if f"xaxis{suffix}" in fig.layout:
                fig.layout[f"xaxis{suffix}"].domain = [max(0.0, x0), min(1.0, x1)]
                fig.layout[f"yaxis{suffix}"].domain = [max(0.0, y0), min(1.0, y1)]
            if panel_titles and index <= len(panel_titles) and panel_titles[index - 1]:
                text, centre = panel_titles[index - 1], (x0 + x1) / 2
                annotations.append(_label(text, "panel title", centre, y1, "center", "bottom", 13, yshift=4))
    if x_title:
        annotations.append(_label(x_title, "x title", 0.5, 0, "center", "top", 14, yshift=-TICK_ROOM))
    if y_title:
        annotations.append(
            _label(y_title, "y title", 0, 0.5, "right", "middle", 14, xshift=-Y_TICK_ROOM, textangle=-90)
        )
    layout: dict = {
        "width": WIDTH,
        "height": int(top + plot_height + bottom),
        "autosize": False,
        "margin": {"l": left, "r": right, "t": top, "b": bottom, "autoexpand": False},
        "title": {
            "text": html_label(title),
            "subtitle": {"text": html_label(subtitle) if subtitle else ""},
            "x": 0,
            "xref": "paper",
            "xanchor": "left",
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 10},
        },
        "annotations": annotations,
        "showlegend": bool(entries),
    }
    if legend == "bottom" and entries:
        layout["legend"] = {
            "orientation": "h",
            "x": -(left - 8) / plot_width,
            "xanchor": "left",
            "y": -(below + 8) / plot_height,
            "yanchor": "top",
            "entrywidth": entry_text,
            "entrywidthmode": "pixels",
            "tracegroupgap": 0,
        }
    elif legend == "right" and entries:
        layout["legend"] = {
            "orientation": "v",
            "x": 1 + (16 + (90 if colorbar else 0)) / plot_width,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "tracegroupgap": 0,
        }
    if _TEMPLATED.get():
        layout["template"] = TEMPLATE
    fig.update_layout(**layout)
    for trace in fig.data:  # names built from data (quantities such as "RBP_1") in HTML too
        if trace.name and ("_" in trace.name or "^" in trace.name):
            trace.name = html_label(trace.name)
    if colorbar:
        fig.update_traces(
            colorbar={"x": 1.0, "xanchor": "left", "xpad": 10, "len": 1.0}, selector={"type": "contour"}
        )
    return fig


def _has_axis_titles(fig: go.Figure, letter: str) -> bool:
    layout = fig.layout.to_plotly_json()
    return any(
        (value.get("title") or {}).get("text")
        for name, value in layout.items()
        if name.startswith(f"{letter}axis") and isinstance(value, dict)
    )


def _label(
    text: str, name: str, x: float, y: float, xanchor: str, yanchor: str, size: int, **shift: float
) -> go.layout.Annotation:
    """A text placed on the figure's paper (panel and axis titles; `name` finds it again)."""
    return go.layout.Annotation(
        text=html_label(text),
        name=name,
        x=x,
        y=y,
        xref="paper",
        yref="paper",
        xanchor=xanchor,
        yanchor=yanchor,
        showarrow=False,
        font={"size": size},
        **shift,
    )
