"""How a figure's text is written and measured: TeX-like notation in plotly's HTML (`html_label`),
its plain text and estimated width (`text_width`, from the number of characters: all a layout test
can read as well), and log axes labelled with their magnitudes (`log_tick_updates`: 2×10⁵, never
the bare "2" plotly writes), as dense as the axis' length allows and never rotated.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Sequence

import numpy as np

FONT_SIZE = 12
CHAR_WIDTH = 0.56  # glyph width of plotly's sans-serif font, in font sizes: measured ~0.48, with room

_TAG = re.compile(r"<[^>]+>")
AXIS_NAME = re.compile(r"[xy]axis\d*")  # a layout key that names an axis: xaxis, yaxis2, ...
# TeX-like notation people write in titles, and its plotly HTML: p_{N,k}, RBP_1, p_(N=10, k=5), S^-α.
_BRACED = re.compile(r"([_^])\{([^{}]*)\}")
_SUBSCRIPT = re.compile(r"\b(RBP|p|L)_(\([^()]*\)|[A-Za-z0-9]+)")
_SUPERSCRIPT = re.compile(r"\^([-−]?[A-Za-z0-9αβ]+)")


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
    layout: dict, data: Sequence, font_size: float, plot_size: tuple[float, float]
) -> dict[str, dict]:
    """The axis settings that label every log axis of a figure (its `layout` as JSON, its traces
    `data`) with magnitudes (plotly writes 2×10⁵ as a bare "2"): 1, 2 and 5 of each decade, or the
    decades alone, or every other decade, the densest of these that fits the axis' length in px
    at text size `font_size` (`plot_size`: the plotting area, width x height); under a decade, round
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
        room = (5 * CHAR_WIDTH + 1.2) * font_size if x_axis else 2.2 * font_size
        tight = (4 * CHAR_WIDTH + 0.6) * font_size if x_axis else 1.5 * font_size
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
