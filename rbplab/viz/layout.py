"""Page geometry shared by every figure: a fixed width that fits a 1,000 px screen, panels placed
in pixels, titles that never run into each other, legends that are never cut, and colours that
say what they encode (a sequential scale for sizes and other ordered values).

plotly places subplots by fractions of the plotting area and never checks that one panel's title
or tick labels fit beside the next; `arrange` therefore lays the panels out in pixels (gaps for tick
labels and titles, margins for the legend rows it needs) and converts to fractions last. The
sizes of text are estimated from the number of characters (`rbplab.viz.labels.text_width`), which
is all a layout test can read as well. What `arrange` was given is recorded in the figure, and read
through this module only (`for_page`, `panel_titles`, `retitle_panel`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative, sample_colorscale

from rbplab.viz.labels import FONT_SIZE, html_label, log_tick_updates, text_width

WIDTH = 960  # px: every figure fits a 1,000 px wide screen or report column
MAX_HEIGHT = 800  # px: and a laptop screen's height
LEGEND_SWATCH = 56  # px a legend entry takes besides its text (symbol, gap and padding)
TICK_ROOM = 24  # px below a panel for its x tick labels
AXIS_TITLE_ROOM = 26  # px for an axis title beyond its tick labels
PANEL_TITLE_ROOM = 24  # px above a panel for its title
CAPTION_ROOM = 20  # px for the caption line under the x title
Y_TICK_ROOM = 48  # px left of a panel for its y tick labels

TITLE_SIZE = 14  # px of axis titles (panel titles one smaller)
PX_PER_INCH = 96  # kaleido writes one px as 1/96 in (0.75 pt) on a PDF page
PAPER_INCHES = {"column": 3.5, "full": 7.0}  # a journal's column and its full text width
# A paper figure's tick labels and legend at 11 px = 8.25 pt, its titles at 12 px = 9 pt.
PAPER_FONT, PAPER_TITLE = 11, 12

TEMPLATE = pio.templates["plotly_white"]  # looked up once: by name it is rebuilt per figure
# Validating a template takes plotly ~15 ms a figure; a view redrawing the figure it shows keeps
# the template it has (`untemplated`), so a slider step does not pay it again.
_TEMPLATED: contextvars.ContextVar[bool] = contextvars.ContextVar("rbplab_templated", default=True)
CATEGORICAL = qualitative.Plotly + qualitative.D3  # unordered things: families, corpora
SIZE_SCALE = "Viridis"  # ordered things (model size S, sequence length N), dark to light
SCALE_END = 0.85  # Viridis' last 15 % is a yellow too pale for lines on white
EMPTY = [None]  # data of a legend-only key trace


@contextlib.contextmanager
def untemplated() -> Iterator[None]:
    """Figures made in this block get no template (not ours, and not plotly's default either:
    plotly gives every new figure its default template): for redrawing a figure that already has
    one, whose template `rbplab.viz.widgets.base.sync_figure(..., keep_template=True)` keeps."""
    token = _TEMPLATED.set(False)
    default = pio.templates.default
    pio.templates.default = "none"
    try:
        yield
    finally:
        pio.templates.default = default
        _TEMPLATED.reset(token)


def templating() -> tuple[bool, str]:
    """Whether figures made now get rbplab's template, and plotly's default template: a figure
    kept for later copies is kept per value of this (`untemplated` changes both)."""
    return _TEMPLATED.get(), str(pio.templates.default)


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


def legend_key(
    name: str,
    *,
    mode: str,
    dash: str = "solid",
    opacity: float = 1.0,
    group: str | None = None,
    symbol: str = "circle",
    width: float = 2,
) -> go.Scatter:
    """A legend-only trace that explains a line or marker style (grey, no data): its `dash` and
    `width`, or its marker `symbol` ("circle-open" for an open marker)."""
    return go.Scatter(
        x=EMPTY,
        y=EMPTY,
        mode=mode,
        name=name,
        line={"color": "#555", "dash": dash, "width": width},
        marker={"color": "#555", "size": 8, "symbol": symbol, "line": {"color": "#555", "width": 2}},
        opacity=opacity,
        legendgroup=group or f"key:{name}",
        legendrank=2000,
        hoverinfo="skip",
        meta="key",
    )


@dataclass(frozen=True)
class Page:
    """Where a figure is shown: its width and most height in px, the size in px of its tick labels
    and legend (`font_size`) and of its axis titles (`title_size`), and whether it draws its own
    title and subtitle (a paper figure has a caption instead). Every margin and gap scales with
    `font_size`."""

    width: int = WIDTH
    max_height: int = MAX_HEIGHT
    font_size: float = FONT_SIZE
    title_size: float = TITLE_SIZE
    titled: bool = True

    @property
    def scale(self) -> float:
        return self.font_size / FONT_SIZE


SCREEN = Page()
PAPER_SIZES = tuple(PAPER_INCHES)


def paper_page(size: str, *, titled: bool = False) -> Page:
    """The page of a paper figure `size` ("column": 3.5 in, "full": 7 in wide) at 8-9 pt text,
    untitled unless `titled`."""
    if size not in PAPER_INCHES:
        from rbplab.core.errors import InvalidArgumentError

        raise InvalidArgumentError(f"unknown figure size {size!r}; choose from {', '.join(PAPER_SIZES)}")
    width = round(PAPER_INCHES[size] * PX_PER_INCH)
    return Page(width, round(9 * PX_PER_INCH), PAPER_FONT, PAPER_TITLE, titled)


@dataclass(frozen=True)
class Panels:
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


def legend_rows(entries: Sequence[str], available: float, size: float = FONT_SIZE) -> tuple[int, float]:
    """(rows, text width in px) of a horizontal legend of `entries` in `available` px at text
    size `size`: every entry's text gets the width of the longest (plotly's `entrywidth`), so the
    rows are predictable."""
    if not entries:
        return 0, 0.0
    swatch = LEGEND_SWATCH * size / FONT_SIZE
    text = min(available - swatch, max(text_width(e, size) for e in entries))
    per_row = max(1, int(available // (text + swatch)))
    return math.ceil(len(entries) / per_row), text


def legend_height(rows: int, size: float = FONT_SIZE) -> float:
    """Height in px plotly gives a legend of `rows` one-line rows (or entries, stacked) at text size
    `size`: each row max(16, 1.3 x size) + 3 px, and 5 px of padding above and below."""
    return rows * (max(16.0, 1.3 * size) + 3) + 10 if rows else 0.0


ARRANGED = "rbplab.arrange"  # where `arrange` records its arguments in layout.meta (`for_page` reads them)


def arrange(
    fig: go.Figure,
    panels: Panels,
    *,
    title: str,
    subtitle: str | None = None,
    panel_titles: Sequence[str] | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    legend: str = "bottom",
    colorbar: bool = False,
    caption: str | None = None,
    page: Page = SCREEN,
) -> go.Figure:
    """Give `fig` (made by make_subplots with panels.rows x panels.cols, or one panel) the shared page
    geometry: `page.width` px wide, at most `page.max_height` px high (panels shrink to fit), each
    panel's title above it, one x title under the panels and one y title left of it (or the axes'
    own titles when `panels.per_axis_y_titles`), the legend below the panels ("bottom", horizontal, as
    many rows as its entries need) or right of it ("right"; below on a page too narrow for that),
    and log axes labelled with their magnitudes. `caption`: one line under the x title naming what
    the figure shows (corpus, models), kept on an untitled paper page. On a narrower page each
    panel keeps the shape it has on the screen. The arguments are recorded in the figure
    (`for_page` lays it out again for another page; `retitle_panel` changes a panel's title in
    both). Returns `fig`."""
    # The layout is worked on as JSON and assigned once: each plotly assignment or update_layout
    # re-validates what it touches, which cost an offline explorer's hundreds of states ~20 ms each.
    current = fig.layout.to_plotly_json()
    template = current.pop("template", None)
    entries = _legend_entries(fig) if legend != "none" else []
    titled = bool(y_title or panels.per_axis_y_titles or _has_axis_titles(current, "y"))
    geo = _geometry(
        current, panels, page, entries, legend, colorbar, titled,
        titles=bool(panel_titles), subtitle=bool(subtitle), x_title=bool(x_title), caption=bool(caption),
    )  # fmt: skip
    names = ("panel title", "x title", "y title", "subtitle", "caption")
    kept = [a for a in current.get("annotations", []) if a.get("name") not in names]
    k = page.scale
    layout: dict = {
        "width": page.width,
        "height": round(geo.top + geo.plot_height + geo.bottom),
        "autosize": False,
        "font": {"size": page.font_size},
        "margin": {"l": geo.left, "r": geo.right, "t": geo.top, "b": geo.bottom, "autoexpand": False},
        "title": {
            "text": html_label(title) if page.titled else "",
            "font": {"size": 17 * k},
            "x": 0,
            "xref": "paper",
            "xanchor": "left",
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 10 * k},
        },
        "showlegend": bool(entries),
        "meta": {
            ARRANGED: {
                "panels": asdict(panels),
                "title": title,
                "subtitle": subtitle,
                "panel_titles": list(panel_titles) if panel_titles else None,
                "x_title": x_title,
                "y_title": y_title,
                "legend": legend,
                "colorbar": colorbar,
                "caption": caption,
            }
        },
    }
    placed = _legend_layout(geo, page, entries, colorbar)
    if placed is not None:
        layout["legend"] = placed
    # The annotations are replaced whole: a figure laid out again (`for_page`) keeps none of the
    # old ones beyond the new ones' count.
    current["annotations"] = kept + _annotations(
        current, geo, panels, page, panel_titles, x_title, y_title, caption, subtitle
    )
    _merge(current, layout)
    _merge(current, log_tick_updates(current, fig.data, page.font_size, (geo.plot_width, geo.plot_height)))
    if _TEMPLATED.get():
        current["template"] = TEMPLATE
    elif template is not None:
        current["template"] = template
    fig.layout = current
    for trace in fig.data:  # names built from data (quantities such as "RBP_1") in HTML too
        if trace.name and ("_" in trace.name or "^" in trace.name):
            trace.name = html_label(trace.name)
    if colorbar:
        fig.update_traces(
            colorbar={"x": 1.0, "xanchor": "left", "xpad": 10 * k, "len": 1.0}, selector={"type": "contour"}
        )
    return fig


@dataclass(frozen=True)
class _Geometry:
    """Where `arrange` puts things, in px: the margins, the plotting area, a panel and the gaps
    between panels; `below`: under the panels to the legend (tick labels, x title, caption), of
    which `caption_top` above the caption; `place`: where the legend goes, in `legend_rows` rows
    of `entry_text` px of text each when below."""

    left: float
    right: float
    top: float
    bottom: float
    plot_width: float
    plot_height: float
    panel_width: float
    panel_height: float
    hgap: float
    vgap: float
    below: float
    caption_top: float
    place: str
    legend_rows: int
    entry_text: float


def _geometry(
    current: dict,
    panels: Panels,
    page: Page,
    entries: Sequence[str],
    legend: str,
    colorbar: bool,
    titled: bool,
    *,
    titles: bool,
    subtitle: bool,
    x_title: bool,
    caption: bool,
) -> _Geometry:
    """The page geometry of a figure whose layout (as JSON) is `current`: `titles`, `subtitle`,
    `x_title`, `caption` say which of them it has."""
    rows = panels.rows
    k = page.scale
    place = _legend_place(panels, page, entries, legend, colorbar, titled)
    tick_room, axis_room, panel_room = TICK_ROOM * k, AXIS_TITLE_ROOM * k, PANEL_TITLE_ROOM * k
    left, right, plot_width, hgap, panel_width = _columns(panels, page, entries, place, colorbar, titled)
    # Between rows: the row above's x tick labels (and its axes' own x titles, as 06's stacked
    # column figure has: the next panel's title sat on them), and the next row's panel titles.
    below_row = tick_room + (axis_room if _has_axis_titles(current, "x") else 0) + 8 * k
    vgap = (panel_room if titles else 8 * k) + (8 * k if panels.shared_x else below_row)
    below = tick_room + (axis_room if x_title or _has_axis_titles(current, "x") else 0)
    caption_top = below
    if caption:
        below += CAPTION_ROOM * k
    n_rows, entry_text = (
        legend_rows(entries, page.width - 16 * k, page.font_size) if place == "bottom" else (0, 0.0)
    )
    heading = (44 + (20 if subtitle else 0)) * k if page.titled else 4 * k
    top = heading + (panel_room if titles else 8 * k)
    # The legend starts 8 px below the x titles and gets its full height and 8 px more (the
    # descenders of its last row): plotly clips a legend that reaches the figure's edge.
    bottom = below + (legend_height(n_rows, page.font_size) + 16 * k if n_rows else 12 * k)
    screen_place = _legend_place(panels, SCREEN, entries, legend, colorbar, titled)
    screen_width = _columns(panels, SCREEN, entries, screen_place, colorbar, titled)[4]
    panel_height = panels.panel_height * min(1.0, panel_width / screen_width)
    fixed = top + bottom + (rows - 1) * vgap
    if fixed + rows * panel_height > page.max_height:
        panel_height = max(80 * k, (page.max_height - fixed) // rows)
    plot_height = rows * panel_height + (rows - 1) * vgap
    if place == "right" and entries:
        # A legend right of the panels runs from their top down into the bottom margin at most.
        panel_height = max(panel_height, (legend_height(len(entries), page.font_size) - bottom) / rows)
        plot_height = rows * panel_height + (rows - 1) * vgap
    return _Geometry(
        left, right, top, bottom, plot_width, plot_height, panel_width, panel_height, hgap, vgap,
        below, caption_top, place, n_rows, entry_text,
    )  # fmt: skip


def _annotations(
    current: dict,
    geo: _Geometry,
    panels: Panels,
    page: Page,
    panel_titles: Sequence[str] | None,
    x_title: str | None,
    y_title: str | None,
    caption: str | None,
    subtitle: str | None,
) -> list[dict]:
    """Each panel's domain (set in `current`) and the texts `arrange` places: panel titles, the x
    and y titles, the caption and the subtitle."""
    k = page.scale
    annotations = []
    for r in range(panels.rows):
        for c in range(panels.cols):
            index = r * panels.cols + c + 1
            suffix = "" if index == 1 else str(index)
            x0 = c * (geo.panel_width + geo.hgap) / geo.plot_width
            x1 = x0 + geo.panel_width / geo.plot_width
            y1 = 1 - r * (geo.panel_height + geo.vgap) / geo.plot_height
            y0 = y1 - geo.panel_height / geo.plot_height
            if index == 1 or f"xaxis{suffix}" in current:  # a one-panel figure may not name its axes
                current.setdefault(f"xaxis{suffix}", {})["domain"] = [max(0.0, x0), min(1.0, x1)]
                current.setdefault(f"yaxis{suffix}", {})["domain"] = [max(0.0, y0), min(1.0, y1)]
            if panel_titles and index <= len(panel_titles) and panel_titles[index - 1]:
                text, centre, size = panel_titles[index - 1], (x0 + x1) / 2, page.title_size - 1
                annotations.append(
                    _label(text, "panel title", centre, y1, "center", "bottom", size, yshift=4 * k)
                )
    if x_title:
        annotations.append(
            _label(x_title, "x title", 0.5, 0, "center", "top", page.title_size, yshift=-TICK_ROOM * k)
        )
    if y_title:
        annotations.append(
            _label(
                y_title, "y title", 0, 0.5, "right", "middle", page.title_size,
                xshift=-Y_TICK_ROOM * k, textangle=-90,
            )
        )  # fmt: skip
    if caption:
        annotations.append(
            _label(
                caption, "caption", -(geo.left - 8 * k) / geo.plot_width, -geo.caption_top / geo.plot_height,
                "left", "top", page.font_size, colour="#444",
            )
        )  # fmt: skip
    if subtitle and page.titled:
        # An annotation at a fixed distance below the title: plotly places its own subtitle from
        # the title's measured height, which is 0 when a widget first draws, so the two overprinted.
        y = 1 + (geo.top - SUBTITLE_TOP * k) / geo.plot_height
        annotations.append(_label(subtitle, "subtitle", 0, y, "left", "top", 13 * k, colour="#444"))
    return annotations


def _legend_layout(geo: _Geometry, page: Page, entries: Sequence[str], colorbar: bool) -> dict | None:
    """The legend's layout where `geo` places it (None: no legend)."""
    k = page.scale
    if geo.place == "bottom" and entries:
        return {
            "orientation": "h",
            "x": -(geo.left - 8 * k) / geo.plot_width,
            "xanchor": "left",
            "y": -(geo.below + 8 * k) / geo.plot_height,
            "yanchor": "top",
            "entrywidth": geo.entry_text,
            "entrywidthmode": "pixels",
            "tracegroupgap": 0,
            # In px: plotly's default (half the figure) cuts a taller legend to a scroll box, which
            # an exported file cannot scroll.
            "maxheight": legend_height(geo.legend_rows, page.font_size) + 8 * k,
        }
    if geo.place == "right" and entries:
        return {
            "orientation": "v",
            "x": 1 + (16 + (90 if colorbar else 0)) * k / geo.plot_width,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "tracegroupgap": 0,
            "maxheight": legend_height(len(entries), page.font_size) + 8 * k,
        }
    return None


def panel_titles(fig: go.Figure) -> list[str]:
    """The panel titles `arrange` drew on `fig`, in panel order (as drawn: HTML)."""
    return [a.text for a in fig.layout.annotations if a.name == "panel title"]


def retitle_panel(fig: go.Figure, index: int, title: str) -> None:
    """Give the `index`-th titled panel of `fig` (0-based, as `panel_titles` lists them) the title
    `title`: drawn now, and in what `arrange` recorded, so `for_page` draws it too. IndexError when
    the figure has no such panel title."""
    drawn = [a for a in fig.layout.annotations if a.name == "panel title"]
    drawn[index].text = html_label(title)
    meta = dict(fig.layout.meta or {})
    recorded = dict(meta.get(ARRANGED) or {})
    titles = list(recorded.get("panel_titles") or [])
    titled = [i for i, text in enumerate(titles) if text]  # arrange draws a title only when given
    if index < len(titled):
        titles[titled[index]] = title
        meta[ARRANGED] = recorded | {"panel_titles": titles}
        fig.layout.meta = meta


SUBTITLE_TOP = 34  # px from the figure's top to its subtitle, under the 17 px title


def _legend_place(
    panels: Panels, page: Page, entries: Sequence[str], legend: str, colorbar: bool, titled: bool
) -> str:
    """Where the legend goes on `page`: where it was asked, but below the panels when a legend on
    the right would leave them less than half the page (on a paper column it left them no width)."""
    if legend == "right" and entries:
        if _columns(panels, page, entries, legend, colorbar, titled)[2] < page.width / 2:
            return "bottom"
    return legend


def _columns(
    panels: Panels, page: Page, entries: Sequence[str], legend: str, colorbar: bool, titled: bool
) -> tuple[float, float, float, float, float]:
    """(left margin, right margin, plot width, gap between columns, panel width) in px."""
    k = page.scale
    left = (Y_TICK_ROOM + (AXIS_TITLE_ROOM if titled else 0) + 8) * k
    right = (16 + (90 if colorbar else 0)) * k
    if entries and legend == "right":
        right += max(text_width(e, page.font_size) for e in entries) + LEGEND_SWATCH * k
    plot_width = page.width - left - right
    hgap = (Y_TICK_ROOM + (AXIS_TITLE_ROOM if panels.per_axis_y_titles else 0) + 12) * k
    return left, right, plot_width, hgap, (plot_width - (panels.cols - 1) * hgap) / panels.cols


def for_page(fig: go.Figure | dict, page: Page) -> go.Figure:
    """A copy of `fig` laid out for `page` (e.g. `paper_page("column")`) from the arguments
    `arrange` recorded in it; a figure `arrange` did not make is scaled to the page's width, with
    its text at the page's size (and no title on an untitled page)."""
    fig = go.Figure(fig)
    meta = fig.layout.meta
    spec = meta.get(ARRANGED) if isinstance(meta, dict) else None
    if spec is None:
        width, height = fig.layout.width or 700, fig.layout.height or 450
        fig.update_layout(
            width=page.width, height=round(height * page.width / width), font={"size": page.font_size}
        )
        if not page.titled:
            fig.update_layout(title_text="")
        return fig
    spec = dict(spec)
    panels = Panels(**spec.pop("panels"))
    if panels.rows == 1 and panels.cols == 2 and page.width < WIDTH / 2:
        # Two panels side by side leave a column ~100 px each: stack them (plotly places panels
        # by domain, so the same axes take the new places).
        panels = replace(panels, rows=2, cols=1, panel_height=round(panels.panel_height * 0.7))
        # Each stacked panel is the leftmost of its row: it labels its y axis (a shared y axis
        # labelled only the first column's).
        fig.update_yaxes(showticklabels=True)
    arrange(fig, panels, page=page, **spec)
    # Markers and lines shrink with the page (not below half): screen-sized ones crowd a column.
    shrink = max(0.5, min(1.0, page.width / WIDTH))
    for trace in fig.data:
        marker, line = getattr(trace, "marker", None), getattr(trace, "line", None)
        if marker is not None and isinstance(getattr(marker, "size", None), (int, float)):
            marker.size = marker.size * shrink
        if line is not None and trace.type == "scatter" and line.width != 0:
            line.width = (line.width or 2) * shrink
    return fig


def _has_axis_titles(layout: dict, letter: str) -> bool:
    """Whether an axis of `letter` in `layout` (a figure's layout as JSON) has a title of its own."""
    return any(
        (value.get("title") or {}).get("text")
        for name, value in layout.items()
        if name.startswith(f"{letter}axis") and isinstance(value, dict)
    )


def _label(
    text: str,
    name: str,
    x: float,
    y: float,
    xanchor: str,
    yanchor: str,
    size: float,
    colour: str | None = None,
    **shift: float,
) -> dict:
    """A text placed on the figure's paper (titles; `name` finds it again), as layout JSON."""
    return {
        "text": html_label(text),
        "name": name,
        "x": x,
        "y": y,
        "xref": "paper",
        "yref": "paper",
        "xanchor": xanchor,
        "yanchor": yanchor,
        "showarrow": False,
        "font": {"size": size} | ({"color": colour} if colour else {}),
        **shift,
    }


def _merge(target: dict, update: dict) -> None:
    """`update` merged into `target` (layout JSON) as plotly's update_layout merges: objects key by
    key, anything else (a list, a number, `meta`, which plotly stores as it is given) replaced."""
    for key, value in update.items():
        old = target.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and key != "meta":
            _merge(old, value)
        else:
            target[key] = value
