"""Every figure's layout, read from the figure itself: it fits the page, no title runs into another
or into a panel, no panel is empty, nothing is drawn white on white, legends are not cut, axes
span the data (not decades of empty space) unless extrapolation was asked for, no raw TeX, and
sizes are on a sequential colour scale.

Text sizes are estimated here from character counts with this module's own constants (a little
wider than the package's), the way a reader of the layout JSON can, independently of
`rbplab.viz.layout`.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from helpers.browser import HAS_KALEIDO

from rbplab.analysis import data_scaling
from rbplab.catalog import paper_reference
from rbplab.core import display
from rbplab.study import Study, decomposition, distribution, emergence, size, synthetic_study
from rbplab.study.synthetic import synthetic_training_table
from rbplab.viz import plots, widgets
from rbplab.viz.widgets.base import ALL_CORPORA

MAX_WIDTH = 1000  # px: a figure must fit a 1,000 px screen
MAX_HEIGHT = 800
AXIS_FACTOR = 10.0  # a log axis may reach at most this factor beyond its data (unless extrapolating)
CHAR = 0.55 * 12  # px per character of 12 px text (measured about 0.48 em)
TITLE_CHAR = 0.55 * 14  # axis and panel titles are 13-14 px
LINE = 18  # px height of a line of text
LEGEND_ROW = 20  # px per legend row
LEGEND_SWATCH = 50  # px of a legend entry besides its text
TICK_LABELS = 20  # px that x tick labels take below an axis, y tick labels ~ 45 px left
Y_TICK_LABELS = 40
WHITE = {"white", "#fff", "#ffffff", "rgb(255,255,255)", "rgba(255,255,255,1)"}
RAW_TEX = re.compile(r"_\{|\^\{|\$|RBP_|p_\{|\\mathrm")
TAG = re.compile(r"<[^>]+>")

CORPORA = ("humaneval", "legal-standin", "prose", "wikipedia")  # the demo's names: long ones included


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=CORPORA)


@pytest.fixture(scope="module")
def training():
    return synthetic_training_table(ks=(1, 100))


def _figures(study: Study, training) -> dict:
    ks = [1, 10, 100]
    sweep = size.ksweep(study)
    em = emergence.table(study, ks, [1, 2, 4, 8, 16, 32])
    sel = training[training["k"] == 1]
    fits = data_scaling.data_fits(sel, y="neg_log_rbp")
    fit = data_scaling.fit_joint_law(sel["S"], sel["D"], sel["neg_log_rbp"])
    surface = data_scaling.law_surface(fit, sel["S"], sel["D"], n=12)
    C = np.geomspace(surface["C"].min(), surface["C"].max(), 20)
    fronts = data_scaling.frontier(fit, C).assign(quantity="RBP_1")
    return {
        "figure 3": plots.rbp_vs_size(study.points(1, n_boot=20), size.fits(study, 1), size.bands(study, 1)),
        "figure 4": plots.rbp_vs_size(study.points(ks), size.fits(study, ks), size.bands(study, ks)),
        "curves": plots.rbp_curves(size.curve_frame(study), marker_k=10),
        "figure 6": plots.ksweep(sweep, vocab_size=study.vocab_size),
        "figure 6 with marker": plots.ksweep(sweep, vocab_size=study.vocab_size, marker_k=50),
        "figure 7": plots.emergence(em, title="Figure 7: p_{N,k} vs S"),
        "figure 7 linearised": plots.emergence_linearised(em),
        "rank distribution": plots.rank_distribution(distribution.rank_pmf(study, CORPORA[1])),
        "lognormal parameters": plots.lognormal_params(distribution.lognormal(study)),
        "lognormal parameters with intervals": plots.lognormal_params(
            distribution.lognormal_intervals(study, n_boot=20)
        ),
        "ce vs rbp": plots.ce_vs_rbp(distribution.ce_comparison(study, n_grid=6)),
        "training": plots.training_dynamics(sel, fits, y_label="-log RBP_1"),
        "training at a step": plots.training_dynamics(sel, fits, step=200),
        "iso-loss": plots.iso_loss(surface, fronts, sel, loss_label="-log RBP_1"),
        "scaling view": widgets.ScalingView(study, live=False).figure,
        "scaling view, all corpora": widgets.ScalingView(study, corpus=ALL_CORPORA, live=False).figure,
        "emergence view": widgets.EmergenceView(study, live=False).figure,
        "k-sweep view": widgets.KSweepView(study, k=100, live=False).figure,
        "rank view": widgets.RankDistributionView(study, live=False).figure,
        "training view": widgets.TrainingView(training, live=False).figure,
        "decomposition vs size": plots.decomposition_vs_size(decomposition.table(study)),
        "decomposition bars": plots.decomposition_bars(decomposition.table(study)),
        "prediction audit": plots.prediction_audit(decomposition.prediction_audit(study, ks)),
        "paper reference": plots.reference_vs_size(paper_reference()),
        "paper reference with own points": plots.reference_vs_size(
            paper_reference(), study.points([1, 10, 100, 1000]).assign(ties=study.ties)
        ),
    }


@pytest.fixture(scope="module")
def figures(study, training) -> dict:
    return _figures(study, training)


FIGURES = [
    "figure 3",
    "figure 4",
    "curves",
    "figure 6",
    "figure 6 with marker",
    "figure 7",
    "figure 7 linearised",
    "rank distribution",
    "lognormal parameters",
    "ce vs rbp",
    "training",
    "training at a step",
    "iso-loss",
    "scaling view",
    "scaling view, all corpora",
    "emergence view",
    "k-sweep view",
    "rank view",
    "training view",
    "decomposition vs size",
    "decomposition bars",
    "prediction audit",
    "paper reference",
    "paper reference with own points",
]


# ---- reading a layout ------------------------------------------------------------------------


def _plain(text) -> str:
    return TAG.sub("", text or "")


def _width(text, char: float = CHAR) -> float:
    lines = re.split(r"<br\s*/?>", text or "")
    return max(len(_plain(line)) for line in lines) * char


class Page:
    """Pixel geometry of a figure from its layout: the plotting area and each axis' domain."""

    def __init__(self, fig):
        self.fig = fig
        lay = fig.layout
        self.width, self.height = lay.width, lay.height
        m = lay.margin  # plotly's defaults where a figure sets none
        left, right, top, bottom = (80 if v is None else v for v in (m.l, m.r, m.t, m.b))
        top = 100 if m.t is None else top
        self.left, self.top = left, top
        self.plot_w = self.width - left - right
        self.plot_h = self.height - top - bottom

    def x(self, fraction: float) -> float:
        return self.left + fraction * self.plot_w

    def y(self, fraction: float) -> float:  # px from the top
        return self.top + (1 - fraction) * self.plot_h

    def axes(self) -> list[tuple[str, str]]:
        """(xaxis, yaxis) layout names of every panel."""
        layout = self.fig.layout.to_plotly_json()
        names = sorted((k for k in layout if re.fullmatch(r"xaxis\d*", k)), key=lambda k: int(k[5:] or 1))
        return [(x, "yaxis" + x[5:]) for x in names if "yaxis" + x[5:] in layout]

    def panel_box(self, xname: str, yname: str) -> tuple[float, float, float, float]:
        xd = self.fig.layout[xname].domain or (0, 1)
        yd = self.fig.layout[yname].domain or (0, 1)
        return (self.x(xd[0]), self.y(yd[1]), self.x(xd[1]), self.y(yd[0]))

    def text_boxes(self) -> list[tuple[str, tuple[float, float, float, float]]]:
        """(text, (x0, y0, x1, y1)) of every title the figure shows."""
        boxes = []
        lay = self.fig.layout
        # The title (17 px) on the first line of the top margin, its subtitle (13 px) under it.
        for text, font_size, y in ((lay.title.text, 17, 10), (lay.title.subtitle.text, 13, 36)):
            if text:
                w = _width(text, 0.55 * font_size)
                boxes.append((_plain(text), (self.left, y, self.left + w, y + font_size + 2)))
        for a in lay.annotations:
            if a.xref != "paper" or a.yref != "paper" or not a.text:
                continue
            w = _width(a.text, TITLE_CHAR)
            x = self.x(a.x) + (a.xshift or 0)
            y = self.y(a.y) - (a.yshift or 0)
            if a.textangle in (-90, 90):
                w, h = LINE, w
            else:
                h = LINE
            x0 = {"left": x, "right": x - w}.get(a.xanchor, x - w / 2)
            y0 = {"top": y, "bottom": y - h}.get(a.yanchor, y - h / 2)
            boxes.append((_plain(a.text), (x0, y0, x0 + w, y0 + h)))
        for xname, yname in self.axes():
            x0, y0, x1, y1 = self.panel_box(xname, yname)
            xt = lay[xname].title.text
            if xt:
                w = _width(xt, TITLE_CHAR)
                cx = (x0 + x1) / 2
                boxes.append(
                    (_plain(xt), (cx - w / 2, y1 + TICK_LABELS, cx + w / 2, y1 + TICK_LABELS + LINE))
                )
            yt = lay[yname].title.text
            if yt:
                h = _width(yt, TITLE_CHAR)
                cy = (y0 + y1) / 2
                boxes.append(
                    (_plain(yt), (x0 - Y_TICK_LABELS - LINE, cy - h / 2, x0 - Y_TICK_LABELS, cy + h / 2))
                )
        return boxes


def _overlap(a, b) -> bool:
    return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


def _data_traces(fig):
    return [t for t in fig.data if t.meta != "key"]


def _finite_points(trace) -> int:
    if trace.type == "contour":
        return int(np.isfinite(np.asarray(trace.z, dtype=float)).sum())
    if trace.x is None or trace.y is None:
        return 0
    x = np.asarray([np.nan if v is None else v for v in trace.x], dtype=float)
    y = np.asarray([np.nan if v is None else v for v in trace.y], dtype=float)
    return int((np.isfinite(x) & np.isfinite(y)).sum())


def _axis_of(trace, letter: str) -> str:
    ref = getattr(trace, f"{letter}axis", None) or letter
    return f"{letter}axis{ref[1:]}"


# ---- the checks --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIGURES)
def test_fits_the_page(figures, name):
    fig = figures[name]
    assert fig.layout.width is not None and fig.layout.width <= MAX_WIDTH, name
    assert fig.layout.height is not None and fig.layout.height <= MAX_HEIGHT, name


@pytest.mark.parametrize("name", FIGURES)
def test_no_title_overlaps_another_or_a_panel(figures, name):
    page = Page(figures[name])
    boxes = page.text_boxes()
    assert boxes, name
    for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        assert not _overlap(a, b), f"{name}: {ta!r} runs into {tb!r}"
    panels = [page.panel_box(x, y) for x, y in page.axes()]
    for text, box in boxes:
        if text == "measured":  # the shaded range's label sits inside its panel by design
            continue
        for panel in panels:
            assert not _overlap(box, panel), f"{name}: {text!r} is drawn over a panel"
        assert box[0] >= -1 and box[2] <= page.width + 1, f"{name}: {text!r} leaves the figure"


@pytest.mark.parametrize("name", FIGURES)
def test_no_empty_panel(figures, name):
    fig = figures[name]
    page = Page(fig)
    for xname, yname in page.axes():
        drawn = [
            t
            for t in _data_traces(fig)
            if _axis_of(t, "x") == xname and _axis_of(t, "y") == yname and _finite_points(t)
        ]
        assert drawn, f"{name}: panel {xname}/{yname} is empty"


def _colours(trace) -> list[str]:
    out = []
    line, marker = getattr(trace, "line", None), getattr(trace, "marker", None)
    if line is not None and line.color is not None and (line.width is None or line.width > 0):
        out.append(line.color)
    if marker is not None and marker.color is not None:
        outline = marker.line.color if marker.line is not None else None
        colours = marker.color if isinstance(marker.color, (list, tuple)) else [marker.color]
        if outline is None or str(outline).replace(" ", "").lower() in WHITE:
            out.extend(str(c) for c in colours)
    if getattr(trace, "fillcolor", None):
        out.append(trace.fillcolor)
    return [str(c).replace(" ", "").lower() for c in out]


@pytest.mark.parametrize("name", FIGURES)
def test_nothing_white_on_white(figures, name):
    fig = figures[name]
    template = fig.layout.template.layout
    assert str(template.plot_bgcolor).lower() in WHITE | {"#ffffff"}  # the background every trace meets
    for trace in fig.data:
        if trace.type != "scatter":
            continue
        white = [c for c in _colours(trace) if c in WHITE]
        assert not white, f"{name}: trace {trace.name!r} is white on a white background (or legend)"


@pytest.mark.parametrize("name", FIGURES)
def test_legend_fits_and_names_each_entry_once(figures, name):
    fig = figures[name]
    page = Page(fig)
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    if fig.layout.showlegend is False or not shown:
        return
    groups = [t.legendgroup for t in shown if t.legendgroup]
    assert len(groups) == len(set(groups)), f"{name}: a legend group has several entries (stacked)"
    legend = fig.layout.legend
    if legend.orientation == "h":
        text = legend.entrywidth or max(_width(t.name) for t in shown)
        per_row = max(1, int((page.width - 16) // (text + LEGEND_SWATCH)))
        rows = -(-len(shown) // per_row)
        top = page.y(legend.y)
        assert top + rows * LEGEND_ROW <= page.height + 2, f"{name}: the legend is cut ({rows} rows)"
        assert top >= page.y(0) + TICK_LABELS, f"{name}: the legend covers the x axis"
        assert max(_width(t.name) for t in shown) <= text + 2, (
            f"{name}: a legend entry is wider than its slot"
        )
    else:
        assert page.top + len(shown) * LEGEND_ROW <= page.height, f"{name}: the legend is cut"
        right = page.x(legend.x) + max(_width(t.name) for t in shown) + LEGEND_SWATCH
        assert right <= page.width + 2, f"{name}: the legend runs off the figure"


@pytest.mark.parametrize("name", FIGURES)
def test_no_raw_tex(figures, name):
    fig = figures[name]
    lay = fig.layout
    texts = [lay.title.text, lay.title.subtitle.text] + [a.text for a in lay.annotations]
    texts += [lay[x].title.text for pair in Page(fig).axes() for x in pair]
    texts += [t.name for t in fig.data]
    for text in texts:
        assert not RAW_TEX.search(text or ""), f"{name}: raw TeX in {text!r}"


def _log_extent(values) -> tuple[float, float] | None:
    v = np.asarray([np.nan if x is None else x for x in values], dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return (float(v.min()), float(v.max())) if len(v) else None


def _axis_excess(fig, letter: str) -> float:
    """The largest factor by which a log axis of `fig` reaches beyond the data drawn on it as
    markers (its explicit range, or the extent of everything drawn on it)."""
    worst = 1.0
    for xname, yname in Page(fig).axes():
        name = xname if letter == "x" else yname
        axis = fig.layout[name]
        if axis.type != "log":
            continue
        on_axis = [t for t in _data_traces(fig) if _axis_of(t, letter) == name and t.type == "scatter"]
        data = [_log_extent(getattr(t, letter)) for t in on_axis if "markers" in (t.mode or "")]
        data = [d for d in data if d]
        if not data:
            continue
        lo, hi = min(d[0] for d in data), max(d[1] for d in data)
        if axis.range is not None:
            drawn = (10 ** axis.range[0], 10 ** axis.range[1])
        else:
            extents = [e for e in (_log_extent(getattr(t, letter)) for t in on_axis) if e]
            drawn = (min(e[0] for e in extents), max(e[1] for e in extents))
        worst = max(worst, lo / drawn[0], drawn[1] / hi)
    return worst


@pytest.mark.parametrize("name", FIGURES)
def test_axes_span_the_data(figures, name):
    fig = figures[name]
    for letter in ("x", "y"):
        assert _axis_excess(fig, letter) <= AXIS_FACTOR, (
            f"{name}: the {letter} axis reaches far beyond the data"
        )


def test_extrapolation_only_when_asked(study):
    em = emergence.table(study, [1, 10], [1, 4, 16], corpora=["prose"])
    assert _axis_excess(plots.emergence(em), "x") <= AXIS_FACTOR
    # The check can fail: asked to extrapolate, the fitted law runs decades beyond the models.
    assert _axis_excess(plots.emergence(em, extrapolate=True), "x") > AXIS_FACTOR
    view = widgets.EmergenceView(study, corpus="prose", live=False)
    assert _axis_excess(view.figure, "x") <= AXIS_FACTOR
    view.set_extrapolate(True)
    assert _axis_excess(view.figure, "x") > AXIS_FACTOR


def _luminance(colour: str) -> float:
    if colour.startswith("#"):
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    else:
        rgb = [float(v) for v in re.findall(r"[\d.]+", colour)[:3]]
    r, g, b = (c / 255 for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize(
    ("name", "meta", "size_of"),
    [
        ("curves", "model", lambda t: t.name),
        ("rank distribution", "lognormal", lambda t: t.name),
        ("training", "fit", lambda t: t.name),
    ],
)
def test_sizes_are_on_a_sequential_scale(figures, study, training, name, meta, size_of):
    fig = figures[name]
    traces = [t for t in fig.data if t.meta == meta and t.xaxis in (None, "x")]
    if name == "training":
        sizes = sorted(training["S"].unique())
    else:
        sizes = sorted(study.models["S"].unique())
    assert len(traces) == len(sizes) >= 3
    # Traces are drawn smallest model first; their colours darken-to-light monotonically.
    lum = [_luminance(t.line.color) for t in traces]
    assert all(b > a for a, b in zip(lum, lum[1:], strict=False)), (name, lum)


def test_a_crowded_layout_is_caught():
    """The checks can fail: plotly's own grid with long titles and a long legend breaks them."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=4, subplot_titles=["legal-standin · k=1"] * 4)
    for c in range(1, 5):
        fig.add_scatter(x=[1, 2], y=[1, 2], row=1, col=c, name=f"a long legend entry {c} " * 3)
        fig.update_xaxes(title_text="non-embedding parameters S", row=1, col=c)
    fig.update_layout(width=700, height=400)
    page = Page(fig)
    boxes = page.text_boxes()
    assert any(_overlap(a, b) for (_, a), (_, b) in itertools.combinations(boxes, 2))
    fig.add_scatter(x=[1, 2], y=[2, 1], line={"color": "white"}, name="frontier")
    assert any(c in WHITE for c in _colours(fig.data[-1]))


# ---- the rendered figure: boxes read from kaleido's SVG ------------------------------------------
# The checks above read the layout plotly is given; these read what Chromium drew: where each
# tick label, title and annotation landed (annotation boxes as the browser measured them, tick
# labels from their anchor, font size and characters), whether plotly rotated or dropped tick
# labels, in the figure as shown and as a paper figure.

# The figures issue 30 found crowded, and the sizes each is rendered at.
RENDERED = {
    "decomposition bars": ("screen", "full"),
    "rank view": ("screen", "full", "column"),
    "figure 7": ("screen", "full", "column"),
    "ce vs rbp": ("screen", "full", "column"),
    "figure 6": ("screen", "full", "column"),
    "training view": ("screen", "full", "column"),
}
_TICK = re.compile(r'<g class="([xy]\d*)tick"><text([^>]*)>(.*?)</text>')
_ANNOTATION = re.compile(
    r'<g class="annotation-text-g" transform="rotate\(([-\d.]+),([-\d.]+),([-\d.]+)\)">'
    r'<g class="cursor-pointer" transform="translate\(([-\d.]+),([-\d.]+)\)">'
    r'<rect class="bg" x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)"[^>]*/>'
    r"<text[^>]*>(.*?)</text>"
)
_TITLE = re.compile(r'<text class="gtitle"([^>]*)>(.*?)</text>')


def _attr(attrs: str, name: str, default: float = 0.0) -> float:
    m = re.search(rf'\b{name}="([-\d.]+)"', attrs)
    return float(m[1]) if m else default


def _chars(inner: str) -> float:
    """Characters of a rendered text, an exponent's counting 70 % (plotly's superscripts)."""
    small = "".join(re.findall(r'<tspan style="font-size:70%"[^>]*>([^<]*)</tspan>', inner))
    text = re.sub(r"<[^>]+>", "", inner).replace("\u200b", "")
    return len(text) - 0.3 * len(small)


def rendered_boxes(svg: str) -> tuple[list[tuple[str, str, tuple]], list[str]]:
    """([(kind, text, (x0, y0, x1, y1))], [rotated tick labels]) of an SVG plotly drew."""
    boxes, rotated = [], []
    for axis, attrs, inner in _TICK.findall(svg):
        size = float(re.search(r"font-size: ?([\d.]+)px", attrs)[1])
        transform = re.search(r'transform="([^"]*)"', attrs)
        tx = ty = 0.0
        if transform:
            if "rotate" in transform[1]:
                rotated.append(re.sub(r"<[^>]+>", "", inner))
            m = re.search(r"translate\(([-\d.]+),\s*([-\d.]+)\)", transform[1])
            tx, ty = (float(m[1]), float(m[2])) if m else (0.0, 0.0)
        x, y = _attr(attrs, "x") + tx, _attr(attrs, "y") + ty
        width = _chars(inner) * 0.55 * size
        anchor = re.search(r'text-anchor="(\w+)"', attrs)[1]
        x0 = {"start": x, "end": x - width}.get(anchor, x - width / 2)
        top = y - 0.8 * size if axis[0] == "x" else y - 0.5 * size  # y ticks are centred on y
        boxes.append((f"{axis} tick", re.sub(r"<[^>]+>", "", inner), (x0, top, x0 + width, top + size)))
    for angle, cx, cy, tx, ty, rx, ry, w, h, inner in _ANNOTATION.findall(svg):
        x0, y0 = float(tx) + float(rx), float(ty) + float(ry)
        w, h = float(w), float(h)
        if float(angle) in (90.0, -90.0):  # turned about its centre
            cx, cy = float(cx), float(cy)
            box = (cx - h / 2, cy - w / 2, cx + h / 2, cy + w / 2)
        else:
            box = (x0, y0, x0 + w, y0 + h)
        # Annotation boxes carry plotly's 1 px border and padding on each side: the text is inside.
        box = (box[0] + 2, box[1] + 2, box[2] - 2, box[3] - 2)
        boxes.append(("annotation", re.sub(r"<[^>]+>", "", inner), box))
    for attrs, inner in _TITLE.findall(svg):
        if not re.sub(r"<[^>]+>", "", inner).strip():
            continue
        size = float(re.search(r"font-size: ?([\d.]+)px", attrs)[1])
        x, y = _attr(attrs, "x"), _attr(attrs, "y")
        boxes.append(("title", inner, (x, y, x + _chars(inner) * 0.55 * size, y + 1.2 * size)))
    return boxes, rotated


@pytest.fixture(scope="module")
def rendered(figures, tmp_path_factory) -> dict:
    """SVG text of each RENDERED figure at each of its sizes, drawn by kaleido (one session a size)."""
    if not HAS_KALEIDO:
        pytest.skip("rendering needs kaleido and Chromium (make browser-deps)")
    from rbplab.viz.export import save_many

    folder = tmp_path_factory.mktemp("rendered")
    out = {}
    for page in ("screen", "full", "column"):
        names = [n for n, sizes in RENDERED.items() if page in sizes]
        paths = [folder / f"{n.replace(' ', '_')}-{page}.svg" for n in names]
        save_many([figures[n] for n in names], paths, size=page, title=page == "screen")
        out |= {(n, page): p.read_text() for n, p in zip(names, paths, strict=True)}
    return out


@pytest.mark.parametrize(("name", "size"), [(n, s) for n, sizes in RENDERED.items() for s in sizes])
def test_rendered_text_never_overlaps(rendered, name, size):
    boxes, rotated = rendered_boxes(rendered[name, size])
    assert any(kind.endswith("tick") for kind, _, _ in boxes) and any(k == "annotation" for k, _, _ in boxes)
    assert not rotated, f"{name} ({size}): plotly rotated tick labels {rotated[:3]} (they hit the x title)"
    for (ka, ta, a), (kb, tb, b) in itertools.combinations(boxes, 2):
        if "measured" in (ta, tb):  # the shaded range's label sits inside its panel by design
            continue
        assert not _overlap(a, b), f"{name} ({size}): {kb} {tb!r} runs into {ka} {ta!r}"


@pytest.mark.parametrize("size", RENDERED["decomposition bars"])
def test_rendered_decomposition_bars_name_every_model(rendered, study, size):
    """Every panel labels every model's size (the wikipedia panel had dropped "2.67M")."""
    boxes, _ = rendered_boxes(rendered["decomposition bars", size])
    labels: dict[str, list[str]] = {}
    for kind, text, _ in boxes:
        if kind.startswith("x"):
            labels.setdefault(kind, []).append(text)
    expected = [display.size(s) for s in sorted(study.models["S"])]
    assert len(labels) == len(CORPORA) and all(v == expected for v in labels.values()), labels


# ---- what issue 30 found in single figures -------------------------------------------------------


def test_figure_7_is_on_log_axes_fitted_to_each_panel(figures, study):
    """p_{N,k} spans decades: on a linear 0-1 axis k = 1 and N >= 4 lay flat on 0. Each panel's
    axis holds every point it draws, lines included (the N >= 16 predictions ran out of the
    panels), and reaches no further below the measurements than a factor 10."""
    fig = figures["figure 7"]
    page = Page(fig)
    for _, yname in page.axes():
        axis = fig.layout[yname]
        on_axis = [t for t in fig.data if _axis_of(t, "y") == yname and _finite_points(t)]
        extent = [e for e in (_log_extent(t.y) for t in on_axis if t.meta == "empirical") if e]
        lo, hi = min(e[0] for e in extent), max(e[1] for e in extent)
        everything = [e for e in (_log_extent(t.y) for t in on_axis) if e]
        assert axis.type == "log", yname
        drawn = 10 ** np.asarray(axis.range)
        assert drawn[0] <= lo and drawn[1] >= hi, (yname, drawn, lo, hi)  # every measurement shown
        assert min(e[0] for e in everything) >= drawn[0] and max(e[1] for e in everything) <= drawn[1], yname
        assert lo / drawn[0] <= AXIS_FACTOR and drawn[1] / max(e[1] for e in everything) <= 2, yname


def test_figure_7_tells_its_two_predictions_apart_by_line_style(figures):
    fig = figures["figure 7"]
    independence = {t.line.dash or "solid" for t in fig.data if t.meta == "independence"}
    law = {t.line.dash or "solid" for t in fig.data if t.meta == "law"}
    assert len(independence) == len(law) == 1 and independence != law
    assert "solid" not in independence | law  # neither is mistaken for a plain connecting line
    # Where the two coincide (they often do) a dotted and a dashed line of one width read as one:
    # the law is a broad faint stroke under the thin dotted line.
    widths = {t.meta: (t.line.width, t.opacity) for t in fig.data if t.meta in ("independence", "law")}
    assert widths["law"][0] >= 2.5 * widths["independence"][0] and widths["law"][1] < 1, widths
    keys = {t.name: t.line.dash for t in fig.data if t.meta == "key" and t.mode == "lines"}
    assert {keys[n] for n in keys if "independence" in n} == independence
    assert {keys[n] for n in keys if "fitted law" in n and "extrapolated" not in n} == law


def _hue(colour: str) -> float:
    import colorsys

    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return colorsys.rgb_to_hls(r, g, b)[0] * 360


def _hue_distance(a: float, b: float) -> float:
    return min(abs(a - b), 360 - abs(a - b))


def test_figure_8ab_pairs_each_corpus_ce_and_rbp_in_one_hue(figures):
    fig = figures["ce vs rbp"]
    colours: dict[tuple[str, str], str] = {}
    for trace in fig.data:
        if trace.meta == "empirical":
            quantity, corpus = (part.strip() for part in _plain(trace.name).split("·"))
            colours[quantity, corpus] = trace.line.color
    corpora = sorted({c for _, c in colours})
    assert len(corpora) == len(CORPORA) and len(colours) == 2 * len(corpora)
    for corpus in corpora:
        ce, rbp = colours["CE", corpus], colours["-log RBP1", corpus]
        others = [c for (_, other), c in colours.items() if other != corpus]
        # One hue: the corpus's two lines are nearer in hue than either is to another corpus's.
        pair = _hue_distance(_hue(ce), _hue(rbp))
        nearest = min(_hue_distance(_hue(own), _hue(c)) for own in (ce, rbp) for c in others)
        assert ce != rbp and pair < nearest, (corpus, ce, rbp, pair, nearest)
        assert _luminance(ce) < _luminance(rbp)  # CE dark, -log RBP_1 light


def test_figure_6_draws_alpha_intervals_as_bands(figures):
    """Error bars of four curves over ~30 ks each overprinted one another."""
    fig = figures["figure 6"]
    alpha = [t for t in fig.data if t.meta == "alpha"]
    bands = [t for t in fig.data if t.meta == "alpha interval"]
    assert alpha and all(t.error_y.array is None for t in alpha)
    assert len(bands) == len(alpha) and all(t.fill == "toself" and t.line.width == 0 for t in bands)


@pytest.mark.parametrize("name", FIGURES)
def test_subtitles_are_placed_not_measured(figures, name):
    """plotly places its own subtitle from the title's measured height, 0 when a widget first draws:
    the rank view's title overprinted its subtitle. A subtitle is an annotation at a fixed place."""
    fig = figures[name]
    assert not fig.layout.title.subtitle.text, name
    page = Page(fig)
    for a in fig.layout.annotations:
        if a.name == "subtitle":
            assert page.y(a.y) >= 34 - 1 and a.yanchor == "top", name  # under the 17 px title


def _panel_widths(layout) -> list[float]:
    """Each panel's width in px, from its x axis' domain and the plot area between the margins."""
    plot = layout.width - layout.margin.l - layout.margin.r
    return [(d[1] - d[0]) * plot for d in (layout[a].domain for a in layout if a.startswith("xaxis"))]


@pytest.mark.parametrize("size", ["full", "column"])
@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_lays_out_for_a_paper_page(figures, name, size):
    """Figure 7's legend on the right took a paper column's whole width: laying it out for the
    column failed with plotly's "Invalid value -49 for height", and the emergence view was drawn
    82 px high with panels -2 px wide."""
    from rbplab.viz.layout import for_page, paper_page

    page = paper_page(size)
    layout = for_page(figures[name], page).layout
    assert layout.width == page.width and 0 < layout.height <= page.max_height, name
    assert min(_panel_widths(layout)) > 0, name
    if layout.legend.orientation == "v":  # a legend right of the panels leaves them half the page
        assert layout.width - layout.margin.l - layout.margin.r >= page.width / 2, name


def test_a_right_legend_goes_below_on_a_page_too_narrow_for_it(figures):
    from rbplab.viz.layout import ARRANGED, SCREEN, for_page, paper_page

    figure7 = figures["figure 7"]
    assert figure7.layout.legend.orientation == "v"  # right of the panels on the screen
    column = for_page(figure7, paper_page("column"))
    assert column.layout.legend.orientation == "h" and column.layout.legend.y < 0  # below them
    assert column.layout.meta[ARRANGED]["legend"] == "right"  # what was asked, for the next page
    assert for_page(column, SCREEN).layout.legend.orientation == "v"


@pytest.mark.parametrize("value", [1e-7, 0.3, 25_000.0])
def test_a_log_axis_of_one_value_is_labelled(value):
    """Every point equal on a log axis (-log RBP_k at k = |V| is the same tiny number for every
    model) used to fail the labelling with a math domain error, failing notebook 02 on real runs."""
    import math

    import plotly.graph_objects as go

    from rbplab.viz.labels import log_tick_updates
    from rbplab.viz.layout import SCREEN

    fig = go.Figure(go.Scatter(x=[1e4, 1e5, 1e6], y=[value] * 3))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_layout(log_tick_updates(fig.layout.to_plotly_json(), fig.data, SCREEN.font_size, (700, 300)))
    ticks = fig.layout.yaxis.tickvals
    assert len(ticks) >= 2 and min(ticks) < value * 1.0001 and max(ticks) > value / 1.0001
    assert all(math.isfinite(t) and t > 0 for t in ticks) and all(fig.layout.yaxis.ticktext)


# ---- what a reviewer reads: ticks, legend entries, corpus and models named ---------------------


def _paper_and_screen(fig, size):
    from rbplab.viz.layout import for_page, paper_page

    return fig if size == "screen" else for_page(fig, paper_page(size))


@pytest.mark.parametrize("size", ["screen", "full", "column"])
@pytest.mark.parametrize("name", FIGURES)
def test_every_log_axis_labels_three_ticks_where_they_fit(figures, name, size):
    """Figure 8ab's 1.5-5.5 log axis had two labels (2 and 5), the audit's 0.2-5 axes no label
    below 0.5 or above 2: two labels do not show an axis is logarithmic. Three where three labels
    of four characters (one line and a half up a y axis) fit, each on the axis' span."""
    fig = _paper_and_screen(figures[name], size)
    page = Page(fig)
    font = fig.layout.font.size or 12
    for xname, yname in page.axes():
        for axis_name in (xname, yname):
            axis = fig.layout[axis_name]
            if axis.type != "log" or axis.tickvals is None:
                continue
            room = (4 * 0.56 + 0.6) * font if axis_name[0] == "x" else 1.5 * font
            domain = axis.domain or (0, 1)
            length = (domain[1] - domain[0]) * (page.plot_w if axis_name[0] == "x" else page.plot_h)
            if length < 3 * room:
                continue
            assert len(axis.tickvals) >= 3 and all(axis.ticktext), (name, size, axis_name, axis.tickvals)


@pytest.mark.parametrize("name", FIGURES)
def test_legend_entries_differ_in_look_not_only_in_text(figures, name):
    """Figures 4 and 5 listed six dashed lines of one colour, told apart only by their text (a
    quarter of the page): an entry per look (a family's colour, a line style), the rest written
    in the panels."""
    looks = {}
    for trace in figures[name].data:
        if trace.showlegend is False or not trace.name or trace.type != "scatter":
            continue
        line, marker = trace.line or {}, trace.marker or {}
        look = (
            trace.mode,
            trace.fill,
            line.color,
            line.dash or "solid",
            line.width,
            marker.color if isinstance(marker.color, str) else None,
            marker.symbol if isinstance(marker.symbol, str) else None,
            trace.opacity,
        )
        assert look not in looks, f"{name}: {trace.name!r} looks like {looks[look]!r}"
        looks[look] = trace.name


def test_the_audits_legend_shows_an_open_marker_for_a_miss(figures):
    keys = {t.name: t.marker.symbol for t in figures["prediction audit"].data if t.meta == "key"}
    open_keys = [name for name in keys if name.startswith("open")]
    filled = [name for name in keys if name.startswith("filled")]
    assert open_keys and filled, keys
    assert keys[open_keys[0]].endswith("-open") and not keys[filled[0]].endswith("-open"), keys


def test_figures_3_to_5_state_each_panels_fit_in_the_panel(figures, study):
    fig = figures["figure 4"]
    notes = [a for a in fig.layout.annotations if a.name == "fit note"]
    assert len(notes) == 3 * len(CORPORA)  # k = 1, 10, 100 on every corpus
    assert all("α = " in a.text and "R² = " in a.text and a.xref.endswith("domain") for a in notes)
    assert not [t for t in fig.data if t.meta == "fit" and t.showlegend is not False]


UNNAMED = {"paper reference"}  # the paper's own GPT-2 numbers: its subtitle names their corpus


@pytest.mark.parametrize("name", [n for n in FIGURES if n not in UNNAMED])
def test_each_paper_figure_names_its_corpus_and_models_without_its_title(figures, name):
    """A paper figure drops its title (a paper has a caption): 06's figures then named their
    corpus nowhere. Panel titles, legend entries and the caption line must."""
    from rbplab.viz.labels import plain_text
    from rbplab.viz.layout import for_page, paper_page

    fig = for_page(figures[name], paper_page("full"))
    texts = [a.text for a in fig.layout.annotations if a.name != "subtitle"] + [
        t.name for t in fig.data if t.name and t.showlegend is not False
    ]
    text = " ".join(plain_text(t) for t in texts)
    assert any(c in text for c in (*CORPORA, "synthetic")), f"{name}: no corpus in {text[:300]!r}"
    assert re.search(r"synthetic|\d+ models", text), f"{name}: no models in {text[:300]!r}"


# ---- a column figure's stacked panels ------------------------------------------------------------


@pytest.mark.parametrize("own_x_titles", [True, False], ids=["axes titled", "one x title"])
def test_stacked_column_panels_leave_room_for_the_row_above(own_x_titles: bool) -> None:
    """Two panels side by side are stacked on a paper column; between them lie the upper panel's
    x tick labels, its axis's own x title when it has one (06's "tokens seen D", on which the
    lower panel's title sat), and the lower panel's title: no more room than that when the axes
    have no titles of their own. Both panels label their y axis."""
    from plotly.subplots import make_subplots

    from rbplab.viz.layout import (
        AXIS_TITLE_ROOM,
        PANEL_TITLE_ROOM,
        TICK_ROOM,
        Panels,
        arrange,
        for_page,
        paper_page,
    )

    fig = make_subplots(rows=1, cols=2, shared_yaxes=True)
    fig.add_scatter(x=[1, 2], y=[1, 2], row=1, col=1)
    fig.add_scatter(x=[1, 2], y=[2, 1], row=1, col=2)
    if own_x_titles:
        fig.update_xaxes(title_text="tokens seen D", row=1, col=1)
        fig.update_xaxes(title_text="S", row=1, col=2)
    arrange(
        fig, Panels(cols=2), title="t", panel_titles=["left", "right"], x_title=None if own_x_titles else "x"
    )
    page = paper_page("column")
    column = for_page(fig, page).layout
    plot_height = column.height - column.margin.t - column.margin.b
    gap = (column.yaxis.domain[0] - column.yaxis2.domain[1]) * plot_height
    k = page.scale
    needed = (TICK_ROOM + (AXIS_TITLE_ROOM if own_x_titles else 0) + 8 + PANEL_TITLE_ROOM) * k
    assert gap == pytest.approx(needed, abs=0.5)
    assert column.yaxis.showticklabels is not False and column.yaxis2.showticklabels is True
