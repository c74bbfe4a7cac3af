"""Page geometry shared by every figure: a fixed width that fits a 1,000 px screen, panels placed
in pixels, titles that never run into each other, legends that are never cut, and colours that
say what they encode (a sequential scale for sizes and other ordered values).

plotly places subplots by fractions of the plotting area and never checks that one panel's title
or tick labels fit beside the next; `arrange` therefore lays the panels out in pixels (gaps for tick
labels and titles, margins for the legend rows it needs) and converts to fractions last. The
sizes of text are estimated from the number of characters (`text_width`), which is all a layout
test can read as well.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative, sample_colorscale

WIDTH = 960  # px: every figure fits a 1,000 px wide screen or report column
MAX_HEIGHT = 800  # px: and a laptop screen's height
FONT_SIZE = 12
CHAR_WIDTH = 0.56  # glyph width of plotly's sans-serif font, in font sizes: measured ~0.48, with room
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

_TAG = re.compile(r"<[^>]+>")
AXIS_NAME = re.compile(r"[xy]axis\d*")  # a layout key that names an axis: xaxis, yaxis2, ...
# TeX-like notation people write in titles, and its plotly HTML: p_{N,k}, RBP_1, p_(N=10, k=5), S^-α.
_BRACED = re.compile(r"([_^])\{([^{}]*)\}")
_SUBSCRIPT = re.compile(r"\b(RBP|p|L)_(\([^()]*\)|[A-Za-z0-9]+)")
_SUPERSCRIPT = re.compile(r"\^([-−]?[A-Za-z0-9αβ]+)")


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
    (`for_page` lays it out again for another page). Returns `fig`."""
    rows, cols = panels.rows, panels.cols
    k = page.scale
    # The layout is worked on as JSON and assigned once: each plotly assignment or update_layout
    # re-validates what it touches, which cost an offline explorer's hundreds of states ~20 ms each.
    current = fig.layout.to_plotly_json()
    template = current.pop("template", None)
    entries = _legend_entries(fig) if legend != "none" else []
    titled = bool(y_title or panels.per_axis_y_titles or _has_axis_titles(current, "y"))
    place = _legend_place(panels, page, entries, legend, colorbar, titled)
    tick_room, axis_room, panel_room = TICK_ROOM * k, AXIS_TITLE_ROOM * k, PANEL_TITLE_ROOM * k
    left, right, plot_width, hgap, panel_width = _columns(panels, page, entries, place, colorbar, titled)
    # Between rows: the row above's x tick labels (and its axes' own x titles, as 06's stacked
    # column figure has: the next panel's title sat on them), and the next row's panel titles.
    below_row = tick_room + (axis_room if _has_axis_titles(current, "x") else 0) + 8 * k
    vgap = (panel_room if panel_titles else 8 * k) + (8 * k if panels.shared_x else below_row)
    below = tick_room + (axis_room if x_title or _has_axis_titles(current, "x") else 0)
    caption_top = below
    if caption:
        below += CAPTION_ROOM * k
    n_rows, entry_text = (
        legend_rows(entries, page.width - 16 * k, page.font_size) if place == "bottom" else (0, 0.0)
    )
    heading = (44 + (20 if subtitle else 0)) * k if page.titled else 4 * k
    top = heading + (panel_room if panel_titles else 8 * k)
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

    names = ("panel title", "x title", "y title", "subtitle", "caption")
    annotations = [a for a in current.get("annotations", []) if a.get("name") not in names]
    for r in range(rows):
        for c in range(cols):
            index = r * cols + c + 1
            suffix = "" if index == 1 else str(index)
            x0 = c * (panel_width + hgap) / plot_width
            x1 = x0 + panel_width / plot_width
            y1 = 1 - r * (panel_height + vgap) / plot_height
            y0 = y1 - panel_height / plot_height
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
            _label(x_title, "x title", 0.5, 0, "center", "top", page.title_size, yshift=-tick_room)
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
                caption, "caption", -(left - 8 * k) / plot_width, -caption_top / plot_height, "left", "top",
                page.font_size, colour="#444",
            )
        )  # fmt: skip
    if subtitle and page.titled:
        # An annotation at a fixed distance below the title: plotly places its own subtitle from
        # the title's measured height, which is 0 when a widget first draws, so the two overprinted.
        y = 1 + (top - SUBTITLE_TOP * k) / plot_height
        annotations.append(_label(subtitle, "subtitle", 0, y, "left", "top", 13 * k, colour="#444"))
    layout: dict = {
        "width": page.width,
        "height": round(top + plot_height + bottom),
        "autosize": False,
        "font": {"size": page.font_size},
        "margin": {"l": left, "r": right, "t": top, "b": bottom, "autoexpand": False},
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
    if place == "bottom" and entries:
        layout["legend"] = {
            "orientation": "h",
            "x": -(left - 8 * k) / plot_width,
            "xanchor": "left",
            "y": -(below + 8 * k) / plot_height,
            "yanchor": "top",
            "entrywidth": entry_text,
            "entrywidthmode": "pixels",
            "tracegroupgap": 0,
            # In px: plotly's default (half the figure) cuts a taller legend to a scroll box, which
            # an exported file cannot scroll.
            "maxheight": legend_height(n_rows, page.font_size) + 8 * k,
        }
    elif place == "right" and entries:
        layout["legend"] = {
            "orientation": "v",
            "x": 1 + (16 + (90 if colorbar else 0)) * k / plot_width,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "tracegroupgap": 0,
            "maxheight": legend_height(len(entries), page.font_size) + 8 * k,
        }
    # The annotations are replaced whole: a figure laid out again (`for_page`) keeps none of the
    # old ones beyond the new ones' count.
    current["annotations"] = annotations
    _merge(current, layout)
    _merge(current, log_tick_updates(current, fig.data, page, (plot_width, plot_height)))
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


def magnitude_label(value: float) -> str:
    """A log-axis tick as its magnitude: 0.05, 20, 500, 2×10⁴ (never a bare "2")."""
    if 1e-2 <= abs(value) < 1e4:
        return f"{value:g}"
    exponent = math.floor(math.log10(abs(value)) + 1e-9)
    mantissa = value / 10**exponent
    power = f"10<sup>{str(exponent).replace('-', '−')}</sup>"
    return power if round(mantissa, 6) == 1 else f"{mantissa:g}×{power}"


def axis_groups(names: Iterable[str], layout: dict) -> dict[str, list[str]]:
    """The axes `names` of `layout` (a figure's layout as JSON) grouped by the axis they match
    (shared_xaxes / shared_yaxes), in the order given: a group shares its range, so its ticks too."""
    groups: dict[str, list[str]] = {}
    for name in names:
        root = (layout.get(name) or {}).get("matches")
        groups.setdefault(f"{root[0]}axis{root[1:]}" if root else name, []).append(name)
    return groups


def log_tick_updates(
    layout: dict, data: Sequence, page: Page, plot_size: tuple[float, float]
) -> dict[str, dict]:
    """The axis settings that label every log axis of a figure (its `layout` as JSON, its traces
    `data`) with magnitudes (plotly writes 2×10⁵ as a bare "2"): 1, 2 and 5 of each decade, or the
    decades alone, or every other decade, the densest of these that fits the axis' length in px
    at `page`'s text size (`plot_size`: the plotting area, width x height); under a decade, round
    values evenly spaced. Tick labels are never rotated: one that would not fit is left out
    instead."""
    width, height = plot_size
    axes = {n: a for n, a in layout.items() if AXIS_NAME.fullmatch(n) and isinstance(a, dict)}
    updates: dict[str, dict] = {name: {"tickangle": 0} for name in axes}
    # One set of ticks per group of matching axes, from the data on all of them and the shortest
    # one's length.
    for members in axis_groups(axes, layout).values():
        if any(axes[n].get("type") != "log" for n in members):
            continue
        extents = [e for e in (_log_axis_extent(data, n, axes[n]) for n in members) if e]
        if not extents:
            continue
        lo, hi = min(e[0] for e in extents), max(e[1] for e in extents)
        lengths = []
        for name in members:
            domain = axes[name].get("domain") or (0, 1)
            lengths.append((domain[1] - domain[0]) * (width if name[0] == "x" else height))
        # A label's room: ~5 characters across an x axis, two lines' height up a y axis; packed
        # tightly (for the three labels every log axis gets when they fit at all), ~4 characters
        # and one line and a half.
        x_axis = members[0][0] == "x"
        room = (5 * CHAR_WIDTH + 1.2) * page.font_size if x_axis else 2.2 * page.font_size
        tight = (4 * CHAR_WIDTH + 0.6) * page.font_size if x_axis else 1.5 * page.font_size
        fewest = MIN_LOG_TICKS if min(lengths) >= MIN_LOG_TICKS * tight else 2
        ticks = _log_ticks(lo, hi, int(min(lengths) // room), fewest)
        labels = [magnitude_label(float(f"{t:.6g}")) for t in ticks]
        for name in members:
            updates[name] |= {"tickmode": "array", "dtick": None, "tickvals": ticks, "ticktext": labels}
            if hi <= lo * 1.0001:
                # One value: plotly's autorange around it is not the factor of two the ticks
                # were spaced for (Figure 5's labels at k near |V| overprinted), so it is set.
                updates[name] |= {"range": [math.log10(lo / 2), math.log10(hi * 2)], "autorange": False}
    return updates


MIN_LOG_TICKS = 3  # a log axis with two labels does not say where it is log (1.5-5.5: "2" and "5")


def _log_ticks(lo: float, hi: float, most: int, fewest: int = MIN_LOG_TICKS) -> list[float]:
    """Between `fewest` and `most` ticks from `lo` to `hi`, as dense as allowed: 1-2-5 per decade,
    1-3, decades, every n-th decade; under a decade or so, round values (1, 2, ... 9 per decade,
    else a round linear step) spread evenly in log."""
    most = max(most, fewest)
    lo, hi = min(lo, hi), max(lo, hi)
    if hi <= lo * 1.0001:  # one value (every model equal, e.g. -log RBP_|V|): a range around it
        lo, hi = lo / 2, hi * 2
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))

    def within(mantissas: Sequence[float]) -> list[float]:
        ticks = [float(m * 10.0**e) for e in range(first, last + 1) for m in mantissas]
        return [t for t in ticks if lo / 1.0001 <= t <= hi * 1.0001]

    for mantissas in ((1, 2, 5), (1, 3), (1,)):
        ticks = within(mantissas)
        if fewest <= len(ticks) <= most:
            return _reach_ends(ticks, within(range(1, 10)), lo, hi, most)
    if len(ticks) > most:  # decades alone are too many: every n-th, or as evenly as `fewest` allow
        every = ticks[:: math.ceil(len(ticks) / most)]
        return every if len(every) >= fewest else _spread(ticks, most)
    ticks = within(range(1, 10))
    if len(ticks) < fewest:  # under a factor of two or so: a round linear step
        step = _round_step((hi - lo) / (most - 1))
        while True:
            ticks = [float(t) for t in np.arange(math.ceil(lo / step) * step, hi * 1.0001, step)]
            if len(ticks) >= fewest:
                break
            step /= 2
    # Round values crowd at the top of each decade (5, 6, 7 ...): keep those a label's room apart.
    kept = _apart(ticks, math.log(hi / lo) / most)
    return kept if len(kept) >= fewest else _spread(ticks, fewest)


def _reach_ends(ticks: list[float], candidates: list[float], lo: float, hi: float, most: int) -> list[float]:
    """`ticks` with a round value added beyond either end when the data reach well past it (the
    audit's 0.2-4.3 axis stopped at 2): the farthest candidate a label's room from the end tick,
    while the labels stay at most `most`."""
    gap = math.log(hi / lo) / most
    above = [c for c in candidates if math.log(c / ticks[-1]) >= gap * 0.999]
    if above and len(ticks) < most:
        ticks = [*ticks, above[-1]]
    below = [c for c in candidates if math.log(ticks[0] / c) >= gap * 0.999]
    if below and len(ticks) < most:
        ticks = [below[0], *ticks]
    return ticks


def _apart(values: Sequence[float], gap: float) -> list[float]:
    """The sorted `values`, each kept at least `gap` (in natural log) above the one kept before."""
    kept = [values[0]]
    for v in values[1:]:
        if math.log(v / kept[-1]) >= gap * 0.999:
            kept.append(v)
    return kept


def _spread(values: Sequence[float], n: int) -> list[float]:
    """`n` of the sorted `values`: the two ends and those nearest to evenly spaced in log between
    them (tick labels on a log axis crowd where round values do)."""
    if len(values) <= n:
        return list(values)
    logs = np.log(values)
    chosen = sorted({int(np.argmin(np.abs(logs - target))) for target in np.linspace(logs[0], logs[-1], n)})
    return [values[i] for i in chosen]


def _round_step(raw: float) -> float:
    """The round step (1, 2, 2.5 or 5 times a power of ten) nearest above `raw`."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _log_axis_extent(traces: Sequence, name: str, axis: dict) -> tuple[float, float] | None:
    """(low, high) drawn on log axis `name`: its explicit range (less 8 % at each end), else the
    positive values of the `traces` on it."""
    if axis.get("range") is not None and axis.get("autorange") in (None, False):
        lo, hi = axis["range"]
        # Ticks keep off the axis' ends, where a y label would meet the x labels at the corner.
        inset = 0.08 * (hi - lo)
        return 10.0 ** (lo + inset), 10.0 ** (hi - inset)
    letter, suffix = name[0], name[5:]
    ref = letter + suffix
    values = []
    for trace in traces:
        if (getattr(trace, f"{letter}axis", None) or letter) != ref:
            continue
        data = getattr(trace, letter, None)
        if data is None:
            continue
        v = _trace_values(data)
        values.append(v[np.isfinite(v) & (v > 0)])
    values = [v for v in values if len(v)]
    if not values:
        return None
    all_values = np.concatenate(values)
    return float(all_values.min()), float(all_values.max())


def _trace_values(data: object) -> np.ndarray:
    """A trace's x or y as floats (None as NaN). A figure read back from JSON (a report's saved
    figures) holds its arrays in plotly's typed-array form, {"dtype": "f8", "bdata": base64},
    which is decoded."""
    if isinstance(data, dict) and "bdata" in data:
        raw = np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data.get("dtype", "f8")))
        return raw.astype(float).ravel()
    return np.asarray([np.nan if x is None else x for x in data], dtype=float)


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
