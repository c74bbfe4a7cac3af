"""rbplab.viz.states: a view's offline explorer holds the states its live controls draw."""

from __future__ import annotations

import base64

import numpy as np
import plotly.graph_objects as go
import pytest

from rbplab.study import Study, size, synthetic_study
from rbplab.viz import states, widgets
from rbplab.viz.widgets import emergence as emergence_view


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=2000, corpora=("a", "b"), sizes=(1e5, 1e6, 1e7, 1e8))


def _array(value: object) -> np.ndarray:
    # Figures as JSON hold numbers as plotly typed arrays ({dtype, bdata}) or plain lists.
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.asarray([np.nan if v is None else v for v in value], dtype=float)


def _shown(traces: list) -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = []
    for t in traces:
        t = t if isinstance(t, dict) else t.to_plotly_json()
        if t.get("visible") is False:
            continue
        out.append((t.get("name"), _array(t.get("x", [])), _array(t.get("y", []))))
    return out


def _same(frame_traces: list, figure: go.Figure) -> None:
    got, want = _shown(frame_traces), _shown(list(figure.data))
    assert [name for name, _, _ in got] == [name for name, _, _ in want]
    for (_, gx, gy), (_, wx, wy) in zip(got, want, strict=True):
        np.testing.assert_allclose(gx, wx, equal_nan=True)
        np.testing.assert_allclose(gy, wy, equal_nan=True)


def _frame(explorer: dict, slider: int, label: str) -> dict:
    """The frame a step of the slider copy `slider` leads to (as a click on it would), its
    traces merged into the figure's as plotly.js does (a frame holds only what changes)."""
    step = next(s for s in explorer["layout"]["sliders"][slider]["steps"] if s["label"] == label)
    name = step["args"][0][0]
    frame = next(f for f in explorer["frames"] if f["name"] == name)
    data = [{**shown, **changed} for shown, changed in zip(explorer["data"], frame["data"], strict=True)]
    return {**frame, "data": data}


def test_explorer_frames_are_the_live_views_states(study: Study) -> None:
    """Each k step of the page's slider leads to the figure the live view draws at that k:
    the same points and fit line, and the title and α in the legend that go with them."""
    view = widgets.ScalingView(study, k=1, corpus="a", live=False)
    explorer = view.explorer()
    copy = next(i for i, s in enumerate(explorer["layout"]["sliders"]) if s["visible"])
    for k in (1, 10, 100, 2_000, study.vocab_size):
        view.set_k(k)
        frame = _frame(explorer, copy, f"{view.k:,}")
        _same(frame["data"], view.figure)
        assert frame["layout"]["title"]["text"] == view.figure.layout.title.text
        alpha = size.fits(study, [view.k], corpora=["a"])["alpha"].iloc[0]
        names = " ".join(t.get("name") or "" for t in frame["data"] if t["visible"])
        # At k = |V| every model has RBP = 1: nothing to fit, no α shown.
        assert (f"α = {alpha:.3f}" in names) if np.isfinite(alpha) else ("α =" not in names)


def test_explorer_holds_every_k_of_the_slider_and_says_so(study: Study) -> None:
    view = widgets.ScalingView(study, k=1, live=False)
    explorer = view.explorer()
    ks = [label for label, _ in view.k_slider.options]
    for slider in explorer["layout"]["sliders"]:
        assert [s["label"] for s in slider["steps"]] == ks
    note = explorer["layout"]["annotations"][-1]["text"]
    assert f"k: all {len(ks)} values (1 … {study.vocab_size:,})" in note
    assert len(explorer["frames"]) == len(ks) * len(view.corpus_dropdown.options)


def test_corpus_dropdown_draws_the_live_views_corpus(study: Study) -> None:
    """The corpus menu writes out the state of the chosen corpus at the view's opening k and
    shows that corpus's copy of the k slider."""
    view = widgets.ScalingView(study, k=10, corpus="a", live=False)
    explorer = view.explorer()
    (menu,) = explorer["layout"]["updatemenus"]
    button = next(b for b in menu["buttons"] if b["label"] == "corpus: b")
    restyle, relayout = button["args"]
    view.set_corpus("b")
    n = len(restyle["type"])
    traces = [{key: values[i] for key, values in restyle.items()} for i in range(n)]
    _same(traces, view.figure)
    assert relayout["title"]["text"] == view.figure.layout.title.text
    shown = [key for key, value in relayout.items() if key.endswith(".visible") and value]
    index = list(view.corpus_dropdown.options).index("b")
    k_index = [v for _, v in view.k_slider.options].index(10)
    assert shown == [f"sliders[{index}].visible"] and relayout[f"sliders[{index}].active"] == k_index


def test_emergence_explorer_k_and_n(study: Study) -> None:
    """N is the second slider (its grid in the note), k the slider along the frames: thinned to
    fit the state budget, and the note says how many of the notebook's k it holds."""
    view = widgets.EmergenceView(study, k=10, n=4, n_max=50, live=False)
    explorer = view.explorer(max_states=45)
    (n_slider,) = [s for s in explorer["layout"]["sliders"] if s["name"] == "N"]  # as the lab names it
    assert [s["label"] for s in n_slider["steps"]] == [str(n) for n in emergence_view.n_grid(50, 4)]
    copy = next(i for i, s in enumerate(explorer["layout"]["sliders"]) if s["name"] == "k" and s["visible"])
    labels = [s["label"] for s in explorer["layout"]["sliders"][copy]["steps"]]
    assert "10" in labels and len(labels) <= 45 // len(n_slider["steps"])  # the current k among them
    assert (
        f"k: {len(labels)} of the notebook's {len(view.k_slider.options)} values"
        in (explorer["layout"]["annotations"][-1]["text"])
    )
    for label in (labels[0], labels[len(labels) // 2]):
        view.set_k(int(label.replace(",", "")))
        frame = _frame(explorer, copy, label)
        _same(frame["data"], view.figure)
        assert frame["layout"]["title"]["text"] == view.figure.layout.title.text


def test_emergence_explorer_tables_its_whole_grid_at_once_and_draws_the_same_states(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer hands its states to `prepare`, which tables every k and N of a corpus in one
    call; each state drawn from that table is the state drawn alone (as the live view draws it)."""
    view = widgets.EmergenceView(study, k=10, n=4, n_max=50, live=False)
    one_by_one = states.explorer(
        view.controls(), view.state, view.values(), max_states=45, fixed=view.fixed()
    )
    calls = []
    table = emergence_view.emergence.table
    monkeypatch.setattr(
        emergence_view.emergence, "table", lambda *a, **k: calls.append(a[1:3]) or table(*a, **k)
    )
    together = view.explorer(max_states=45)
    assert together == one_by_one
    (ks, ns) = calls[0]
    assert len(calls) == 1 and len(ks) * len(ns) == len(together["frames"])  # one table, every state
    assert view._tables == {}  # nothing kept for the live view


def test_thinning_keeps_ends_and_the_current_value_and_says_so() -> None:
    k = states.Control("k", tuple(range(1, 101)), tuple(map(str, range(1, 101))))
    corpus = states.Control("corpus", ("a", "b"), ("a", "b"), slider=False)
    kept = states.thin([corpus, k], {"k": 37, "corpus": "a"}, max_states=40)
    assert kept[0] == corpus
    assert kept[1].values[0] == 1 and kept[1].values[-1] == 100 and 37 in kept[1].values
    assert 2 * len(kept[1].values) <= 42 and kept[1].reach == 100
    assert f"k: {len(kept[1].values)} of the notebook's 100 values (1 … 100)" in states.note(kept)


def test_a_trace_one_state_lacks_is_hidden_and_attributes_are_unset() -> None:
    """Frames merge into the figure: a band (fill) in one state must not stay in the next."""

    def state(k: int) -> go.Figure:
        fig = go.Figure(go.Scatter(x=[1, 2], y=[k, k], name=f"line {k}"))
        if k == 1:
            fig.add_scatter(x=[1, 2, 1], y=[0, 1, 0], fill="toself", name="band")
            fig.data[0].update(line={"dash": "dot"})
        return fig

    k = states.Control("k", (1, 2), ("1", "2"))
    explorer = states.explorer([k], state, {"k": 1})
    first, second = (f["data"] for f in explorer["frames"])
    assert first[1]["visible"] is True and second[1]["visible"] is False
    assert first[0]["line"]["dash"] == "dot"
    assert second[0]["line"]["dash"] is None  # set in state 1, unset explicitly in state 2
    # What every state shares stays in the figure only; the figure opens on the first state.
    assert "x" not in first[0] and explorer["data"][0]["x"] == [1, 2]
    assert explorer["data"][0]["name"] == "line 1" and second[0]["name"] == "line 2"


def test_control_values_and_labels_must_match() -> None:
    with pytest.raises(ValueError, match="2 values but 1 labels"):
        states.Control("k", (1, 2), ("1",))


def test_training_explorer_step_and_k_are_the_live_views_states() -> None:
    """Notebook 06's view: the step slider's frames and the k menu's states are what the live
    view draws; corpus and loss stay as the view has them and the note names them."""
    from rbplab.study.synthetic import synthetic_training_table

    view = widgets.TrainingView(synthetic_training_table(ks=(1, 100)), k=1, live=False)
    explorer = view.explorer()
    copy = next(i for i, s in enumerate(explorer["layout"]["sliders"]) if s["visible"])
    steps = [label for label, _ in view.step_slider.options]
    assert [s["label"] for s in explorer["layout"]["sliders"][copy]["steps"]] == steps
    for label, step in view.step_slider.options[:2]:
        view.set_step(step)
        _same(_frame(explorer, copy, label)["data"], view.figure)
    (menu,) = explorer["layout"]["updatemenus"]
    restyle, relayout = menu["buttons"][1]["args"]
    view.set_step(view.step_slider.options[-1][1])  # the menu draws the view's opening step
    view.set_k(100)
    _same(
        [{key: values[i] for key, values in restyle.items()} for i in range(len(restyle["type"]))],
        view.figure,
    )
    assert relayout["title"]["text"] == view.figure.layout.title.text
    note = explorer["layout"]["annotations"][-1]["text"]  # the loss as its menu shows it
    assert "loss = −log RBP<sub>k</sub> = −log Pr(rank ≤ k) (as in the notebook)" in note


def test_emergence_explorer_on_cached_summaries_holds_the_summaries_k_grid(study: Study) -> None:
    """Runs read from the cache keep hit runs at their summary's k grid only: the explorer's k are
    exactly the live slider's (that grid), each drawable, none thinned at this size."""
    import dataclasses

    from rbplab.core.runs import Run
    from rbplab.core.stats import summarize

    runs = [
        Run(r.family, r.model, r.corpus, r.S, dataclasses.replace(summarize(r.stats).complete(), stats=None))
        for r in study.runs
    ]
    view = widgets.EmergenceView(Study(runs), n=2, n_max=2, corpus="b", live=False)
    explorer = view.explorer()
    grid = {f"{int(k):,}" for k in runs[0].stats.ks}
    offered = [label for label, _ in view.k_slider.options]
    view.set_k(view.k_slider.options[-1][1])  # the last stop draws (|V| was offered and failed)
    for slider in (s for s in explorer["layout"]["sliders"] if s["name"] == "k"):
        labels = [s["label"] for s in slider["steps"]]
        assert labels == offered and set(labels) <= grid
    assert f"k: all {len(offered)} values" in explorer["layout"]["annotations"][-1]["text"]


def _inside(figure: dict, layout: dict) -> list[str]:
    """The visible traces of `figure` with a point outside the axis range `layout` gives it."""
    out = []
    for t in figure["data"]:
        if t.get("visible") is False:
            continue
        for letter in "xy":
            axis = layout[f"{letter}axis{(t.get(f'{letter}axis') or letter)[1:]}"]
            values = _array(t.get(letter, []))
            if axis.get("type") == "log":
                values = np.log10(values[values > 0])  # what a log axis cannot draw is not drawn
            values = values[np.isfinite(values)]
            lo, hi = axis["range"]
            if len(values) and (values.min() < lo or values.max() > hi):
                out.append(f"{t.get('name')}: {letter} {values.min()}..{values.max()} outside [{lo}, {hi}]")
    return out


def test_every_frame_and_every_corpus_carries_the_axis_range_of_its_data(study: Study) -> None:
    """Plotly.animate keeps the axis range a frame does not name: each frame (a k) and each
    corpus choice (its relayout) names the range its own points, fit and band need."""
    view = widgets.ScalingView(study, k=1, corpus="a", live=False)
    explorer = view.explorer(max_states=30)
    layout = explorer["layout"]
    assert _inside(explorer, layout) == []
    copy = next(i for i, s in enumerate(layout["sliders"]) if s["visible"])
    ranges = set()
    for step in layout["sliders"][copy]["steps"]:
        frame = _frame(explorer, copy, step["label"])
        shown = {**layout, **frame["layout"]}
        if shown["yaxis"].get("range") is None:  # k = |V|: -log RBP = 0 for all, nothing on a log axis
            assert all((_array(t["y"]) <= 0).all() for t in frame["data"] if t.get("visible") is True)
            continue
        assert shown["yaxis"]["autorange"] is False
        assert _inside(frame, shown) == [], step["label"]
        ranges.add(tuple(shown["yaxis"]["range"]))
    assert len(ranges) > len(layout["sliders"][copy]["steps"]) // 2  # the range follows the data
    menu = explorer["layout"]["updatemenus"][0]
    for button in menu["buttons"]:
        restyle, relayout = button["args"]
        assert relayout["yaxis"]["autorange"] is False and len(relayout["yaxis"]["range"]) == 2


def test_fit_axes_spans_points_error_bars_and_bars_and_leaves_set_ranges() -> None:
    figure = {
        "data": [
            {"type": "scatter", "x": [1e3, 1e5], "y": [1.0, 2.0]}
            | {"error_y": {"type": "data", "array": [0.5, 1]}},
            {"type": "bar", "x": [1e4], "y": [3.0], "xaxis": "x2", "yaxis": "y2"},
            {"type": "scatter", "x": [1.0], "y": [99.0], "visible": "legendonly"},
        ],
        "layout": {"xaxis": {"type": "log"}, "yaxis2": {"range": [0, 10], "autorange": False}},
    }
    states.fit_axes(figure)
    layout = figure["layout"]
    assert layout["xaxis"]["range"] == pytest.approx([3 - 0.1, 5 + 0.1])  # decades, padded 5 %
    assert layout["yaxis"]["range"] == pytest.approx([0.5 - 0.125, 3.0 + 0.125])  # the error bars
    assert layout["yaxis2"]["range"] == [0, 10]  # the state's own range stays
    assert layout["xaxis2"]["range"] == pytest.approx([5e3, 1.5e4])  # one value: a range around it


def _menu_explorer(options: int) -> dict:
    """An explorer whose one control is a menu of `options` choices, on a figure 450 px high with
    margins of 100 px above and 80 below (a plot 270 px high)."""

    def state(corpus: str) -> go.Figure:
        return go.Figure(
            go.Scatter(x=[1, 2], y=[1, 2]), layout={"height": 450, "margin": {"t": 100, "b": 80}}
        )

    names = tuple(f"c{i}" for i in range(options))
    return states.explorer([states.Control("corpus", names, names, slider=False)], state, {"corpus": "c0"})


def _option_span(layout: dict, menu: dict) -> tuple[float, float]:
    """The px (from the figure's top) that an opened menu's options cover, as plotly draws them:
    each option `_MENU_ITEM` px, under its header (down) or above its top (up)."""
    plot = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    header = layout["margin"]["t"] + plot - menu["y"] * plot
    items = states._MENU_ITEM * len(menu["buttons"])
    if menu["direction"] == "down":
        return header + states._MENU_ITEM, header + states._MENU_ITEM + items
    return header - items, header


# Under the menu's header lie the rest of its row and the one-line note: 46 + 25 - 35 = 36 px,
# one option; over it the plot and the top margin: 80 + 270 + 100 = 450 px, twelve options.
@pytest.mark.parametrize(
    ("options", "direction", "grown"),
    [(1, "down", False), (2, "up", False), (12, "up", False), (13, "down", True)],
    ids=["one fits below", "two: just too many below", "twelve fit above", "thirteen: room made below"],
)
def test_a_menu_opens_where_its_options_lie_inside_the_figure(
    options: int, direction: str, grown: bool
) -> None:
    """Notebook 04's corpus menu opened down past the figure's bottom edge, where the page's
    next cell lay over its options: each menu opens where all of them lie inside the figure."""
    layout = _menu_explorer(options)["layout"]
    (menu,) = layout["updatemenus"]
    assert menu["direction"] == direction
    assert (layout["height"] > 450 + 46 + 25) == grown
    top, bottom = _option_span(layout, menu)
    assert 0 <= top and bottom <= layout["height"], (top, bottom, layout["height"])


def test_the_second_controls_menu_opens_inside_the_figure(study: Study) -> None:
    """The corpus menu above the k slider (01, 02) too: its options lie inside the figure."""
    wide = synthetic_study(n_tokens=500, corpora=tuple("abcdefgh"), sizes=(1e5, 1e6, 1e7))
    for view in (widgets.ScalingView(study, live=False), widgets.ScalingView(wide, live=False)):
        layout = view.explorer(max_states=40)["layout"]
        (menu,) = layout["updatemenus"]
        top, bottom = _option_span(layout, menu)
        assert 0 <= top and bottom <= layout["height"], (len(menu["buttons"]), top, bottom, layout["height"])


@pytest.mark.parametrize("now", [1, 2, 14, 15, 16, 32, 33])
def test_thinning_spaces_its_stops_evenly_around_the_current_value(now: int) -> None:
    """12 of 33 values: the ends and the current value kept, and no two stops closer than half
    the even spacing (3 values) unless the current value lies beside an end (2: 1 and 2)."""
    values = tuple(range(1, 34))
    k = states.Control("k", values, tuple(map(str, values)))
    n = states.Control("N", tuple(range(10)), tuple(map(str, range(10))))
    kept = states.thin([n, k], {"k": now, "N": 0}, max_states=120)[1].values
    assert len(kept) <= 12 and {1, 33, now} <= set(kept)
    gaps = np.diff(kept)
    beside_an_end = now in (2, 32)
    assert gaps.min() >= (1 if beside_an_end else 2), kept
    assert (gaps < 2).sum() <= (1 if beside_an_end else 0), kept


def test_thinning_keeps_an_even_grid_that_holds_the_current_value_as_it_is() -> None:
    values = tuple(range(1, 34))
    k = states.Control("k", values, tuple(map(str, values)))
    kept = states.thin([k], {"k": 1}, max_states=12)[0].values
    assert kept == tuple(int(v) + 1 for v in np.round(np.linspace(0, 32, 12)))


def test_every_explorer_control_is_named_as_its_live_widget(study: Study) -> None:
    """One name per control: the explorer's sliders, menus and note call a control what the
    lab's widget calls it (03's N slider was "n" in the report, 06's loss menu "quantity")."""
    from rbplab.study.synthetic import synthetic_training_table

    views = [
        widgets.ScalingView(study, live=False),
        widgets.KSweepView(study, live=False),
        widgets.EmergenceView(study, n=3, n_max=20, live=False),
        widgets.RankDistributionView(study, live=False),
        widgets.TrainingView(synthetic_training_table(ks=(1, 100)), live=False),
    ]
    for view in views:
        described = {control.description for control in view._controls()}
        shown = {control.shown for control in view.controls()}
        assert shown <= described, (type(view).__name__, shown - described)
    explorer = widgets.EmergenceView(study, n=3, n_max=20, live=False).explorer(max_states=40)
    prefixes = [s["currentvalue"]["prefix"] for s in explorer["layout"]["sliders"]]
    assert "N = " in prefixes and "n = " not in prefixes


# A linear probability axis (maxallowed 1): data reaching 1 exactly, just under and just over
# the point where the 5 % pad would pass 1 (0.5 to 0.97 pads to 0.5 - 0.0235 ... 0.9935).
@pytest.mark.parametrize(
    ("high", "top"),
    [(1.0, 1.0), (0.97, 0.97 + 0.05 * 0.47), (0.98, 1.0), (0.5 + 1 / 1.05 * 0.5, 1.0)],
    ids=["reaches 1", "pad ends under 1", "pad would pass 1", "pad ends at 1"],
)
def test_fit_axes_keeps_a_probability_axis_under_1(high: float, top: float) -> None:
    figure = {
        "data": [{"type": "scatter", "x": [1, 2], "y": [0.5, high]}],
        "layout": {"yaxis": {"maxallowed": 1.0}},
    }
    low, got = states.fit_axes(figure)["layout"]["yaxis"]["range"]
    assert got == pytest.approx(top, rel=1e-12) and got <= 1.0
    assert low == pytest.approx(0.5 - 0.05 * (high - 0.5))
