"""Offline explorers: a notebook view's states packed into one plotly figure with its controls.

A view of `rbplab.viz.widgets` draws its figure with one function, `state(**values)`, taking one
value per control (k, N, corpus, family, ...). Live, a slider move calls it once. Headless
(papermill, the report) no kernel answers a slider, so `explorer` calls the same `state` over the
values each control can take and packs the figures as plotly frames switched by plotly sliders and
dropdowns: the executed notebook and its report page keep the view's controls with no kernel, and
the two cannot drift because they are the same function.

The last control (k, say) is a slider whose steps go to frames; a frame holds what changes along
that slider only (the figure keeps the rest). The control before it (corpus, N) is a dropdown or
a second slider whose choices write out their state whole (restyle and relayout): it shows its
own copy of the last slider and draws the chosen value at the view's opening value of the last
control. Earlier controls (a family chosen among several, notebook 03's corpus) stay as the view
has them. Why not frames for both: plotly.js does not redraw sliders and menus when a frame
changes them (a menu a frame rewrites keeps its old click handlers), while a relayout does; so
the two controls cannot both be frame-driven and stay coupled. A grid larger than `max_states`
is thinned evenly on the last control, and a note under the figure says what it holds either way.
"""

from __future__ import annotations

import base64
import copy
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from rbplab.core.errors import InvalidArgumentError
from rbplab.viz.labels import AXIS_NAME, axis_groups, html_label
from rbplab.viz.layout import untemplated

MAX_STATES = 400  # ~4-10 kB of traces each: a page of a few MB at most
# A frame switch is a redraw without transition: the figure follows the control at once.
_ANIMATE = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}
_DROPDOWN_ROW = 46  # px below the figure for the dropdowns
_MENU_ITEM = 35  # px per option of an opened dropdown
_SLIDER_ROW = 100  # px per slider (the current value above it, the track, its step labels)
_NOTE_LINE = 15  # px per line of the note stating the precomputed grid
_NOTE_WIDTH = 120  # characters per line of that note
_LABELLED_STEPS = 12  # sliders with more steps show only the current value (labels would overlap)
_FRAME_LAYOUT_SKIP = ("template", "meta")  # not drawn, or not changed by a state
_PAD = 0.05  # of the data's span (in decades on a log axis), each side, as plotly pads an autorange


@dataclass(frozen=True)
class Control:
    """One control of a view: the keyword of its `state`, the values the explorer precomputes
    (in the control's order) with their labels, and whether it is drawn as a slider or a
    dropdown. `reach` is how many values the live control offers (the note says when the
    explorer holds fewer). `title` is the name a reader sees on it, the live widget's
    description (03's N slider takes `n`): `name` when not given."""

    name: str
    values: tuple[object, ...]
    labels: tuple[str, ...]
    slider: bool = True
    reach: int | None = None
    title: str | None = None

    @property
    def shown(self) -> str:
        """The name written on the control and in the explorer's note."""
        return self.title or self.name

    def __post_init__(self) -> None:
        if not self.values:
            raise InvalidArgumentError(f"control {self.name!r} has no values")
        if len(self.labels) != len(self.values):
            raise InvalidArgumentError(
                f"control {self.name!r} has {len(self.values)} values but {len(self.labels)} labels"
            )

    def index(self, value: object) -> int:
        """The position of `value` (the view's current value) among the precomputed ones."""
        for i, v in enumerate(self.values):
            if v == value:
                return i
        raise InvalidArgumentError(
            f"{self.name}={value!r} is not among the explorer's values {list(self.values)}"
        )


def thin(controls: Sequence[Control], current: Mapping[str, object], max_states: int) -> list[Control]:
    """`controls` with at most `max_states` combinations: the last control (the slider the
    explorer moves along its frames) keeps evenly spaced values, its ends and the current value
    included: evenly spaced on each side of the current value, the stops shared between the two
    sides by their lengths (the current value added to one even spacing put it one step from
    a stop: 03's k slider held 1, 14, 15, 30)."""
    *others, last = controls
    rest = int(np.prod([len(c.values) for c in others]))
    keep = max(2, max_states // rest)
    n = len(last.values)
    if keep >= n:
        return list(controls)
    now = last.index(current[last.name])
    gaps = keep - 1
    if now in (0, n - 1) or gaps < 2:
        picked = np.linspace(0, n - 1, keep)
    else:
        left = min(max(round(gaps * now / (n - 1)), 1), gaps - 1)
        picked = np.r_[np.linspace(0, now, left + 1), np.linspace(now, n - 1, gaps - left + 1)]
    order = sorted({*np.round(picked).astype(int).tolist(), now})
    thinned = replace(
        last,
        values=tuple(last.values[j] for j in order),
        labels=tuple(last.labels[j] for j in order),
        reach=last.reach or len(last.values),
    )
    return [*others, thinned]


def note(controls: Sequence[Control], fixed: Mapping[str, str] | None = None) -> str:
    """The line under an explorer saying what it holds: each control's values (all the live
    control reaches, or how many of them), and the settings it keeps as the notebook set them."""
    parts = []
    for c in controls:
        held = f"{c.labels[0]} … {c.labels[-1]}" if c.slider and len(c.values) > 3 else ", ".join(c.labels)
        if c.reach is not None and c.reach > len(c.values):
            parts.append(f"{c.shown}: {len(c.values)} of the notebook's {c.reach} values ({held})")
        elif c.slider:
            parts.append(f"{c.shown}: all {len(c.values)} values ({held})")
        else:
            parts.append(f"{c.shown}: {held}")
    # A value written as TeX-like text (−log RBP_k) in plotly's HTML, as the figure's titles are.
    parts += [f"{name} = {html_label(value)} (as in the notebook)" for name, value in (fixed or {}).items()]
    n = int(np.prod([len(c.values) for c in controls]))
    lines = [f"Offline explorer, {n} precomputed states"]
    for part in parts:  # wrapped at part boundaries (plotly does not wrap text)
        if len(lines[-1]) + 3 + len(part) > _NOTE_WIDTH:
            lines.append(part)
        else:
            lines[-1] += " · " + part
    return "<br>".join(lines)


def explorer(
    controls: Sequence[Control],
    state: Callable[..., go.Figure],
    current: Mapping[str, object],
    *,
    max_states: int = MAX_STATES,
    fixed: Mapping[str, str] | None = None,
    prepare: Callable[[list[dict]], None] | None = None,
) -> dict:
    """One plotly figure (as JSON: a dict with data, layout and frames) holding `state(**values)`
    for every combination of the last two controls' values (earlier ones stay at `current` and
    are named in the note with `fixed`), opening on `current`. `prepare`, when given, is handed
    every state's values before any state is drawn (a view that can compute them together does).

    The last control is a slider whose steps go to frames (one copy of it per value of the
    control before, which is a dropdown or a slider of its own: choosing there shows its copy of
    the last slider and draws that choice at the view's opening value of the last control)."""
    if not controls:
        raise InvalidArgumentError("an explorer needs at least one control")
    *kept, second, last = [None, *controls] if len(controls) == 1 else controls
    # A kept control is named as its widget shows it: its title and its value's label.
    fixed = {**{c.shown: c.labels[c.index(current[c.name])] for c in kept}, **(fixed or {})}
    varied = [c for c in (second, last) if c is not None]
    varied = thin(varied, current, max_states)
    second, last = (None, varied[0]) if len(varied) == 1 else varied
    seconds = second.values if second is not None else (None,)
    s0 = second.index(current[second.name]) if second is not None else 0
    p0 = last.index(current[last.name])

    def values_of(s: int, p: int) -> dict:
        values = {c.name: current[c.name] for c in kept} | {last.name: last.values[p]}
        if second is not None:
            values[second.name] = seconds[s]
        return values

    def figure(s: int, p: int) -> dict:
        return json.loads(pio.to_json(state(**values_of(s, p)), validate=False))

    combos = [(s, p) for s in range(len(seconds)) for p in range(len(last.values))]
    if prepare is not None:
        prepare([values_of(s, p) for s, p in combos])
    base = figure(s0, p0)
    with untemplated():  # the base figure holds the template; frames need none
        figures = [base if combo == (s0, p0) else figure(*combo) for combo in combos]
    for f in figures:
        fit_axes(f)
    data = _aligned_data([f["data"] for f in figures])
    layouts = [
        {k: copy.deepcopy(v) for k, v in f["layout"].items() if k not in _FRAME_LAYOUT_SKIP} for f in figures
    ]
    # The last control's copies are sliders, or menus for a control of a few named choices (a
    # corpus): a slider of two stops clipped its end label and looked like a range.
    kind, last_row = ("sliders", _SLIDER_ROW) if last.slider else ("updatemenus", _DROPDOWN_ROW)
    block = last_row + (0 if second is None else _SLIDER_ROW if second.slider else _DROPDOWN_ROW)
    grid_text = note(varied, fixed)
    note_px = _NOTE_LINE * (grid_text.count("<br>") + 1) + 10
    for layout in [*layouts, base["layout"]]:
        _make_room(layout, block + note_px)
    varying = _varying_layout(layouts)

    layout = dict(base["layout"])
    plot_h, y_px = _plot_height(layout), _bottom_px(layout) - block - note_px
    grid_note = _note_annotation(grid_text, layout, note_px)
    if second is not None:
        # One button per value of the second control: the state at the last control's opening
        # value, written out (restyle + relayout), and its copy of the last slider shown.
        steps = []
        for s, label in enumerate(second.labels):
            i = combos.index((s, p0))
            # Relayout replaces a container whole (a frame merges into it): the state's own
            # value, null where it has none (a second panel's axes go); the note stays.
            relayout = {key: layouts[i].get(key) for key in varying}
            if "annotations" in relayout:
                relayout["annotations"] = [*varying["annotations"][i], grid_note]
            for j in range(len(seconds)):
                relayout[f"{kind}[{j}].visible"] = j == s
            relayout[f"{kind}[{s}].active"] = p0
            steps.append({"label": label, "method": "update", "args": [_restyle(data[i]), relayout]})
        y = -y_px / plot_h
        if second.slider:
            layout["sliders"] = [_slider(second, steps, s0, y)]
        else:
            for b in steps:
                if not b["label"].startswith(second.shown):
                    b["label"] = f"{second.shown}: {b['label']}"
            layout["updatemenus"] = [
                {"type": "dropdown", "direction": _open_menu(layout, len(steps), y_px), "active": s0,
                 "buttons": steps, "x": 0.0, "xanchor": "left", "y": y, "yanchor": "top",
                 "showactive": True, "name": second.shown}
            ]  # fmt: skip
        y_px += _SLIDER_ROW if second.slider else _DROPDOWN_ROW
    copies = []
    for s in range(len(seconds)):
        steps = [
            {"label": label, "method": "animate", "args": [[_frame_name(s, p, len(last.values))], _ANIMATE]}
            for p, label in enumerate(last.labels)
        ]
        if last.slider:
            copies.append(_slider(last, steps, p0, -y_px / plot_h) | {"visible": s == s0})
        else:
            direction = _open_menu(layout, len(steps), y_px)
            copies.append(_menu(last, steps, p0, -y_px / plot_h, direction) | {"visible": s == s0})
    # The second control's slider or menu (if any) is the last entry, after the copies its steps index.
    layout[kind] = copies + layout.get(kind, [])
    layout["annotations"] = [
        *_padded(layout.get("annotations", []), _longest(layouts, "annotations")),
        grid_note,
    ]
    frames = []
    n = len(last.values)
    for s in range(len(seconds)):
        # A frame merges into the layout: it carries what changes along its own slider only
        # (a panel the second control adds or removes is the relayout's business).
        own = _varying_layout(layouts[s * n : (s + 1) * n])
        changing = _changing(data[s * n : (s + 1) * n])
        for p in range(n):
            i = s * n + p
            frame_layout = {key: own[key][p] for key in own}
            if "annotations" in own:
                frame_layout["annotations"] = _padded(own["annotations"][p], len(layout["annotations"]) - 1)
            frames.append({"name": _frame_name(s, p, n), "data": changing[p], "layout": frame_layout})
    return {"data": data[combos.index((s0, p0))], "layout": layout, "frames": frames}


def fit_axes(figure: dict) -> dict:
    """Give each axis of `figure` (a figure's JSON, changed in place and returned) that has no
    range of its own the range its visible traces span (points, error bars, a bar's base at 0),
    padded as plotly pads an autorange, in decades on a log axis. A frame or a relayout that
    switches to another state keeps the axis' old range unless the state names its own
    (`Plotly.animate` does not autorange): with this every state carries the range it needs.
    Axes that match another share their group's range; a categorical axis is left to plotly."""
    layout = figure.setdefault("layout", {})
    spans: dict[str, list[np.ndarray]] = {}
    for trace in figure.get("data", []):
        if trace.get("visible", True) is not True:
            continue
        for letter, values in _drawn(trace).items():
            ref = trace.get(f"{letter}axis") or letter
            spans.setdefault(f"{letter}axis{ref[1:]}", []).append(values)
    names = {n for n in layout if AXIS_NAME.fullmatch(n) and isinstance(layout[n], dict)} | set(spans)
    for members in axis_groups(sorted(names), layout).values():
        axes = [layout.get(n) or {} for n in members]
        if any(a.get("range") is not None and a.get("autorange") in (None, False) for a in axes):
            continue  # the state set its own range
        values = [v for n in members for v in spans.get(n, [])]
        if not values or any(v is None for v in values):
            continue  # nothing drawn, or categories: plotly's autorange places them
        log = any(a.get("type") == "log" for a in axes)
        span = _span(np.concatenate(values), log)
        if span is None:
            continue
        span = _allowed(span, axes)
        for name in members:
            layout[name] = {**(layout.get(name) or {}), "range": span, "autorange": False}
    return figure


def _drawn(trace: dict) -> dict[str, np.ndarray | None]:
    """The x and y values a trace draws (None for categories): its points, their error bars,
    and for bars the base at 0 they rise from."""
    out: dict[str, np.ndarray | None] = {}
    for letter in "xy":
        raw = trace.get(letter)
        if raw is None:
            continue
        values = _numbers(raw)
        if values is None:
            out[letter] = None
            continue
        error = trace.get(f"error_{letter}") or {}
        if error.get("visible", True) and error.get("type") == "data" and error.get("array") is not None:
            plus = _numbers(error["array"])
            minus = plus if error.get("symmetric", True) else _numbers(error.get("arrayminus"))
            extra = [values + plus if plus is not None and len(plus) == len(values) else None]
            extra.append(values - minus if minus is not None and len(minus) == len(values) else None)
            values = np.concatenate([values, *(e for e in extra if e is not None)])
        out[letter] = values
    if trace.get("type") == "bar":
        value_axis = "x" if trace.get("orientation") == "h" else "y"
        if out.get(value_axis) is not None:
            out[value_axis] = np.r_[out[value_axis], 0.0]
    return out


def _numbers(raw: object) -> np.ndarray | None:
    """An array of a figure's JSON as floats (None as NaN); None when it holds text."""
    if raw is None:
        return None
    if isinstance(raw, dict) and "bdata" in raw:
        decoded = np.frombuffer(base64.b64decode(raw["bdata"]), dtype=np.dtype(raw.get("dtype", "f8")))
        return decoded.astype(float).ravel()
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    if any(isinstance(v, str) for v in items):
        return None
    return np.asarray([np.nan if v is None else v for v in items], dtype=float).ravel()


def _span(values: np.ndarray, log: bool) -> list[float] | None:
    """The padded [low, high] of `values` as an axis range (log10 of it on a log axis)."""
    values = values[np.isfinite(values)]
    if log:
        values = np.log10(values[values > 0])
    if not len(values):
        return None
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-9 * max(1.0, abs(hi)):
        # One value (every model equal): a range around it, as wide as the ticks drawn for it
        # (`rbplab.viz.labels.log_tick_updates` spans a factor of 2 each way).
        width = np.log10(2) if log else (abs(hi) / 2 or 1.0)
        return [lo - width, hi + width]
    pad = _PAD * (hi - lo)
    return [lo - pad, hi + pad]


def _allowed(span: list[float], axes: list[dict]) -> list[float]:
    """`span` inside the bounds the axes allow (`maxallowed`, `minallowed`, in range units: a
    probability's axis ends at 1), as plotly bounds its own autorange."""
    lo, hi = span
    top = min((a["maxallowed"] for a in axes if a.get("maxallowed") is not None), default=None)
    bottom = max((a["minallowed"] for a in axes if a.get("minallowed") is not None), default=None)
    if top is not None:
        hi = min(hi, top)
    if bottom is not None:
        lo = max(lo, bottom)
    return [lo, hi]


def _frame_name(s: int, p: int, n: int) -> str:
    return str(s * n + p)


def _open_menu(layout: dict, options: int, y_px: float) -> str:
    """Which way a dropdown of `options` choices whose header's top lies `y_px` below the plot
    opens so that every option lies inside the figure: down when the room under its header
    holds them, else up over the plot when that holds them, else down into room added below
    the figure (`layout` grows). An option past the figure's edge lies under the page's next
    cell, where no click reaches it (notebook 04's corpus menu, issue 50)."""
    below = _bottom_px(layout) - y_px - _MENU_ITEM  # under the header
    above = float(_margin(layout).get("t", 100)) + _plot_height(layout) + y_px
    needed = _MENU_ITEM * options
    if needed <= below:
        return "down"
    if needed <= above:
        return "up"
    _make_room(layout, math.ceil(needed - below))
    return "down"


def _menu(control: Control, steps: list[dict], active: int, y: float, direction: str) -> dict:
    """A dropdown of `control`'s choices (its buttons are `steps`, labelled "name: label"),
    opening `direction` ("down" or "up": `_open_menu`)."""
    buttons = [b | {"label": f"{control.shown}: {b['label']}"} for b in steps]
    return {
        "type": "dropdown",
        "direction": direction,
        "active": active,
        "buttons": buttons,
        "x": 0.0,
        "xanchor": "left",
        "y": y,
        "yanchor": "top",
        "showactive": True,
        "name": control.shown,
    }


def _slider(control: Control, steps: list[dict], active: int, y: float) -> dict:
    labelled = len(steps) <= _LABELLED_STEPS
    return {
        "name": control.shown,
        "active": active,
        "steps": steps,
        "x": 0.0,
        "len": 1.0,
        "xanchor": "left",
        "y": y,
        "yanchor": "top",
        "pad": {"t": 28, "b": 0},
        "currentvalue": {
            "prefix": f"{control.shown} = ",
            "visible": True,
            "xanchor": "left",
            "font": {"color": "#222", "size": 14},
        },
        # Many steps: their labels would overlap; the current value above says where it is.
        "font": {"color": "#444" if labelled else "rgba(0,0,0,0)"},
    }


def _restyle(traces: list[dict]) -> dict:
    """Restyle arguments that make the figure's traces `traces` (same slots): each top-level
    attribute of any slot, per slot its value or null (restyle replaces an attribute whole)."""
    keys = dict.fromkeys(k for t in traces for k in t)
    out = {}
    for k in keys:
        values = [t.get(k) for t in traces]
        # A container (line, marker) a slot lacks is set empty: restyle cannot read a null one.
        empty = {} if any(not _is_leaf(v) for v in values if v is not None) else None
        out[k] = [empty if v is None else v for v in values]
    return out


def _note_annotation(text: str, layout: dict, height: int) -> dict:
    y_px = _bottom_px(layout) - height + 4
    return {
        "name": "explorer grid",
        "text": text,
        "showarrow": False,
        "xref": "paper",
        "yref": "paper",
        "x": 0.0,
        "xanchor": "left",
        "y": -y_px / _plot_height(layout),
        "yanchor": "top",
        "font": {"size": 11, "color": "#666"},
        "align": "left",
    }


def _margin(layout: dict) -> dict:
    return layout.setdefault("margin", {})


def _plot_height(layout: dict) -> float:
    m = _margin(layout)
    return float(layout.get("height", 450)) - float(m.get("t", 100)) - float(m.get("b", 80))


def _bottom_px(layout: dict) -> float:
    return float(_margin(layout).get("b", 80))


def _make_room(layout: dict, px: int) -> None:
    """Grow the figure's bottom margin (and so its height) by `px`: the plot keeps its size."""
    m = _margin(layout)
    m["b"] = float(m.get("b", 80)) + px
    layout["height"] = float(layout.get("height", 450)) + px
    layout["autosize"] = False


def _is_leaf(value: object) -> bool:
    # A typed array ({dtype, bdata}) is one value, not a container of attributes.
    return not isinstance(value, dict) or "bdata" in value


def _shape_of(values: Sequence[object]) -> object:
    """The union of the attribute trees of `values` (None for a leaf)."""
    dicts = [v for v in values if not _is_leaf(v)]
    if not dicts:
        return None
    keys = dict.fromkeys(k for d in dicts for k in d)
    return {k: _shape_of([d[k] for d in dicts if k in d]) for k in keys}


def _complete(value: object, shape: object) -> object:
    """`value` with every attribute of `shape` it lacks set to null. A frame is merged into the
    figure, so an attribute one state sets and the next does not (a band's fill) must be unset
    explicitly or it stays."""
    if shape is None:
        return value
    if value is None:
        value = {}  # a container plotly.js reads into must be an object, its attributes null
    elif _is_leaf(value):
        return value
    return {k: _complete(value.get(k), sub) for k, sub in shape.items()} | {
        k: v for k, v in value.items() if k not in shape
    }


def _aligned_data(states: Sequence[list[dict]]) -> list[list[dict]]:
    """Each state's traces over the same slots: trace i of every state completed to the union
    of slot i's attributes, slots a state lacks hidden."""
    n = max(len(d) for d in states)
    shapes = [_shape_of([d[i] for d in states if i < len(d)]) for i in range(n)]
    out = []
    for traces in states:
        row = []
        for i, shape in enumerate(shapes):
            if i < len(traces):
                row.append(_complete({"visible": True, **traces[i]}, shape))
            else:
                row.append({"type": _first_type(states, i), "visible": False})
        out.append(row)
    return out


def _changing(states: Sequence[list[dict]]) -> list[list[dict]]:
    """Each state's traces without the attributes that are the same in every state (of one copy
    of the slider): a frame merges into the figure, which holds them already since it opened on,
    or was restyled to, a state of that copy (hover templates, colours, the S of every point)."""
    same = [
        {
            k
            for k in states[0][i]
            if all(json.dumps(d[i].get(k)) == json.dumps(states[0][i][k]) for d in states)
        }
        for i in range(len(states[0]))
    ]
    return [
        [{k: v for k, v in t.items() if k not in same[i]} for i, t in enumerate(traces)] for traces in states
    ]


def _first_type(states: Sequence[list[dict]], i: int) -> str:
    return next(d[i].get("type", "scatter") for d in states if i < len(d))


def _longest(layouts: Sequence[dict], key: str) -> int:
    return max((len(layout.get(key) or []) for layout in layouts), default=0)


def _padded(items: list, n: int) -> list:
    return [*items, *({"visible": False} for _ in range(n - len(items)))]


def _varying_layout(layouts: Sequence[dict]) -> dict[str, list]:
    """Per top-level layout key that differs between states, its value in every state, completed
    (lists of annotations or shapes padded to the longest, hidden) so frames replace it whole."""
    keys = dict.fromkeys(k for layout in layouts for k in layout)
    out = {}
    for key in keys:
        values = [layout.get(key) for layout in layouts]
        if all(v == values[0] for v in values):
            continue
        if any(isinstance(v, list) for v in values):
            n = max(len(v or []) for v in values)
            values = [_padded(list(v or []), n) for v in values]
            shapes = [_shape_of([v[i] for v in values]) for i in range(n)]
            out[key] = [[_complete(item, s) for item, s in zip(v, shapes, strict=True)] for v in values]
        else:
            shape = _shape_of(values)
            out[key] = [_complete(v if v is not None else {}, shape) if shape else v for v in values]
    return out
