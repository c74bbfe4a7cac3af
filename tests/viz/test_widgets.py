"""rbplab.viz.widgets: callbacks driven programmatically update the live figure in place."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from rbplab.study import Study, emergence, size, synthetic_study
from rbplab.viz import widgets
from rbplab.viz.widgets import base
from rbplab.viz.widgets import emergence as emergence_view


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=("a", "b"))


@pytest.fixture(scope="module")
def two_families() -> Study:
    small = synthetic_study(n_tokens=2000, corpora=("a",), family="small", vocab_size=1000)
    big = synthetic_study(
        n_tokens=2000, corpora=("a", "c"), family="big", vocab_size=8000, sizes=(1e6, 1e7, 1e8)
    )
    return Study(small.runs + big.runs)


def _marker_y(view: base.View) -> np.ndarray:
    return np.concatenate([np.asarray(t.y, float) for t in view.figure.data if t.mode == "markers"])


def test_k_slider_is_log_spaced_integers_up_to_vocab(study: Study) -> None:
    view = widgets.ScalingView(study)
    values = [v for _, v in view.k_slider.options]
    assert values[0] == 1 and values[-1] == study.vocab_size
    assert {10, 100, 1000} <= set(values)
    assert values[:10] == list(range(1, 11))  # every small k is reachable
    big = np.array([v for v in values if v >= 20])
    assert np.diff(np.log(big)).max() < 0.1  # fine, even steps on the log scale


def test_set_k_updates_the_same_figure_in_place(study: Study) -> None:
    view = widgets.ScalingView(study, corpus="a", live=True)
    assert isinstance(view.figure, go.FigureWidget)
    figure, traces = view.figure, view.figure.data
    before, updates = _marker_y(view), view.updates
    view.set_k(100)
    assert view.k == 100 and view.updates == updates + 1
    assert view.figure is figure and view.figure.data[0] is traces[0]  # updated, not replaced
    after = _marker_y(view)
    expected = study.points(100, corpora=["a"]).sort_values("S")["neg_log_rbp"].to_numpy()
    assert np.allclose(after, expected) and not np.allclose(before, after)
    assert "k=100" in view.figure.layout.title.text


def test_set_k_snaps_to_the_slider_and_rejects_out_of_range(study: Study) -> None:
    view = widgets.ScalingView(study)
    view.set_k(101)
    assert view.k in [v for _, v in view.k_slider.options] and abs(np.log(view.k / 101)) < 0.1
    with pytest.raises(ValueError, match=r"k must lie in \[1, \|V\|=4096\]"):
        view.set_k(5000)


def test_all_corpora_and_corpus_switch(study: Study) -> None:
    view = widgets.ScalingView(study)
    assert view.corpus_dropdown.value == "a"  # one corpus by default: quickest to redraw
    assert [a.text for a in view.figure.layout.annotations if a.name == "panel title"] == ["a · k=1"]
    view.set_corpus(base.ALL_CORPORA)
    assert [a.text for a in view.figure.layout.annotations if a.name == "panel title"] == [
        "a · k=1",
        "b · k=1",
    ]
    with pytest.raises(ValueError, match="unknown corpus"):
        view.set_corpus("zzz")


def test_family_switch_updates_corpora_and_vocab(two_families: Study) -> None:
    view = widgets.ScalingView(two_families, family="small", k=1000)
    assert view.family_dropdown.options == (base.ALL_FAMILIES, "small", "big")
    assert view.k_slider.options[-1][1] == 1000
    view.set_family("big")
    assert view.k_slider.options[-1][1] == 8000 and view.k == 1000  # k kept, range widened
    assert "c" in view.corpus_dropdown.options
    view.set_corpus("c")
    view.set_family("small")  # "c" does not exist there: falls back to the first corpus
    assert view.corpus_dropdown.value == "a"
    markers = [t for t in view.figure.data if t.meta == "models"]
    assert all("small" in t.name for t in markers)
    with pytest.raises(ValueError, match="unknown family"):
        view.set_family("medium")


def _drawn_as(view, predicted: np.ndarray) -> None:
    """The view's prediction line is `predicted` wherever it lies on the panel's log axis, and
    ends (not drawn) below it (RBP_1^20 ~ 1e-22 would leave the panel)."""
    line, axis = view.figure.data[1], view.figure.layout.yaxis
    y = np.asarray(line.y, dtype=float)
    low = 10 ** axis.range[0]
    assert np.allclose(y[predicted >= low], predicted[predicted >= low])
    assert np.isnan(y[predicted < low]).all()


def test_emergence_view_n_and_k(study: Study) -> None:
    view = widgets.EmergenceView(study, k=1, n=1, corpus="b", n_max=200)
    assert view.n_slider.max == 200
    emp = view.figure.data[0]
    pred = view.figure.data[1]
    assert np.allclose(emp.y, pred.y)  # N = 1: the empirical rate is RBP_k itself
    view.set_n(20)
    rbp = study.points(1, corpora=["b"]).sort_values("S")["rbp"].to_numpy()
    _drawn_as(view, rbp**20)
    view.set_k(10)
    rbp10 = study.points(10, corpora=["b"]).sort_values("S")["rbp"].to_numpy()
    _drawn_as(view, rbp10**20)
    with pytest.raises(ValueError, match="N must lie"):
        view.set_n(500)


def test_emergence_view_opens_on_a_visible_k(study: Study) -> None:
    view = widgets.EmergenceView(study, n=10, corpus="b", live=False)
    grid = [k for _, k in view.k_slider.options]
    rbp = study.points(grid, corpora=["b"])
    largest = rbp[rbp["S"] == rbp["S"].max()].set_index("k")["rbp"]
    p = largest**10
    # The smallest k of the slider's grid where the largest model's p_{10,k} exceeds 5 %.
    assert (
        p[view.k] > emergence_view.VISIBLE_P
        and (p[[k for k in grid if k < view.k]] <= emergence_view.VISIBLE_P).all()
    )
    assert view.k > 1  # at k = 1 the synthetic family's p_{10,1} is ~0: the old default showed nothing
    assert p[1] < 0.01
    pred = [t for t in view.figure.data if t.meta == "independence"][0]
    assert max(pred.y) == pytest.approx(p[view.k])
    assert not [t for t in view.figure.data if t.meta == "extrapolation"]  # measured sizes only
    # Asked to, the fitted law runs beyond the largest model, dashed and named as an extrapolation.
    view.set_extrapolate(True)
    extra = [t for t in view.figure.data if t.meta == "extrapolation"]
    assert len(extra) == 1 and extra[0].line.dash == "dash" and "extrapolated" in extra[0].name
    assert np.nanmax(np.asarray(extra[0].x, dtype=float)) > 10 * rbp["S"].max()
    # At a larger N the visible k moves up; an explicit k is kept.
    assert emergence_view.visible_k(study, 100, "b") > view.k
    assert widgets.EmergenceView(study, k=1, n=10, corpus="b", live=False).k == 1


def test_ksweep_view_moves_its_marker_along_the_sweep(study: Study) -> None:
    view = widgets.KSweepView(study, k=1, live=True)
    sweep = size.ksweep(study)
    assert [v for _, v in view.k_slider.options] == sorted(sweep["k"].unique())
    figure, first = view.figure, view.figure.data[0]
    view.set_k(100)
    assert view.figure is figure and view.figure.data[0] is first  # redrawn in place
    marks = [t for t in view.figure.data if t.meta == "marker"]
    at = sweep[sweep["k"] == view.k].set_index("corpus")
    assert len(marks) == 2 * len(study.corpora)
    for trace in marks:
        corpus = trace.name.split(" at ")[0]
        expected = at.loc[corpus, "r2" if trace.xaxis == "x" else "alpha"]
        assert list(trace.x) == [view.k] and trace.y[0] == pytest.approx(expected)
    view.set_corpus("b")
    assert {t.name.split(" at ")[0] for t in view.figure.data if t.meta == "marker"} == {"b"}
    with pytest.raises(ValueError, match="k must lie"):
        view.set_k(10**6)


def test_rank_distribution_view(study: Study) -> None:
    view = widgets.RankDistributionView(study)
    first = np.asarray(view.figure.data[0].y).copy()
    view.set_corpus("b")
    assert "b" in view.figure.layout.title.text
    assert not np.array_equal(first, view.figure.data[0].y)


def test_hold_refresh_batches_changes(study: Study) -> None:
    view = widgets.ScalingView(study)
    updates = view.updates
    with view.hold_refresh():
        view.set_k(10)
        view.set_corpus("b")
    assert view.updates == updates
    view.refresh()
    assert view.updates == updates + 1 and "k=10" in view.figure.layout.title.text


def test_live_frontend_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(base.STATIC_ENV, "1")
    assert base.live_frontend() is False
    monkeypatch.setenv(base.STATIC_ENV, "0")
    assert base.live_frontend() is True
    monkeypatch.delenv(base.STATIC_ENV)
    assert base.live_frontend() is False  # no kernel here (plain pytest)


def test_display_live_and_headless(study: Study, monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list = []
    # A live view displays its widget (base); the explorer goes out as a mime bundle (frontend.show).
    for module in (base, base):
        monkeypatch.setattr(module, "display", lambda obj, raw=False: shown.append((obj, raw)))
    monkeypatch.setenv(base.STATIC_ENV, "0")
    live = widgets.ScalingView(study)
    assert live.live and isinstance(live.figure, go.FigureWidget)
    live._ipython_display_()
    assert [obj for obj, _ in shown] == [live.widget]  # a live front end renders the widget itself
    shown.clear()
    monkeypatch.setenv(base.STATIC_ENV, "1")
    live._ipython_display_()  # a live view in a headless run: widget plus a static copy
    assert shown[0][0] is live.widget and base.PLOTLY_MIME in shown[1][0]
    shown.clear()
    headless = widgets.ScalingView(study)
    assert not headless.live and type(headless.figure) is go.Figure
    headless._ipython_display_()
    assert len(shown) == 1 and shown[0][1] is True
    bundle = shown[0][0][base.PLOTLY_MIME]
    # Headless, the view shows its offline explorer: the figure's traces, and the frames its
    # slider steps through (rbplab.viz.states; tests/viz/test_states.py checks the states).
    assert len([t for t in bundle["data"] if t.get("visible") is not False]) == len(headless.figure.data)
    assert bundle["layout"]["title"]["text"] == headless.figure.layout.title.text
    assert bundle["frames"] and bundle["layout"]["sliders"][0]["name"] == "k"
    with pytest.raises(RuntimeError, match="headless"):
        _ = headless.widget


def test_view_needs_a_study() -> None:
    with pytest.raises(TypeError, match="Study"):
        widgets.ScalingView({"x": 1})


def test_emergence_view_offers_the_k_a_cached_summary_keeps(study: Study) -> None:
    import dataclasses

    from rbplab.core.runs import Run
    from rbplab.core.stats import summarize

    # Runs as read from the cache: summaries without their tokens (hit runs at the grid's k only).
    runs = [
        Run(r.family, r.model, r.corpus, r.S, dataclasses.replace(summarize(r.stats).complete(), stats=None))
        for r in study.runs
    ]
    cached = Study(runs)
    grid = {int(k) for k in runs[0].stats.ks}
    view = widgets.EmergenceView(cached, n=10, corpus="b", live=False)
    offered = [k for _, k in view.k_slider.options]
    assert set(offered) <= grid | {cached.vocab_size} and view.k in offered
    assert 77 not in grid
    view.set_k(77)  # snaps to the grid, and the figure can be drawn there
    assert view.k in grid and [t for t in view.figure.data if t.meta == "empirical"]
    with pytest.raises(KeyError, match="k = 77 is not one of them"):
        emergence.table(cached, [77], [10], corpora=["b"])  # why the slider keeps to the grid


@pytest.mark.parametrize("live", [True, False])
def test_redraws_keep_the_house_template_and_drop_stale_layout(study: Study, live: bool) -> None:
    # Redraws are built without a template (it costs plotly ~15 ms to validate one) and must keep
    # the one the figure has: plotly's default template would turn the background grey.
    from rbplab.viz.layout import TEMPLATE

    view = widgets.EmergenceView(study, corpus="a", live=live)
    for n in (2, 5):
        view.set_n(n)
    scaling = widgets.ScalingView(study, corpus="a", live=live)
    scaling.set_k(10)
    scaling.set_corpus(base.ALL_CORPORA)  # more panels: a different layout
    scaling.set_corpus("b")
    for v in (view, scaling):
        assert v.figure.layout.template.layout.plot_bgcolor == TEMPLATE.layout.plot_bgcolor == "white"
        fresh = v.build().layout.to_plotly_json()  # what a first draw would show, template aside
        shown = v.figure.layout.to_plotly_json()
        assert set(shown) - {"template"} == set(fresh) - {"template"}  # no stale property left
    assert "N=5" in view.figure.layout.title.text and "k=10" in scaling.figure.layout.title.text


def test_rank_distribution_explorer_picks_the_corpus_from_a_menu(study: Study) -> None:
    """Offline (the report's 04) the corpus is a menu, as in the lab: a slider of two stops read as
    a range and clipped its end label. Each choice animates to that corpus's state."""
    view = widgets.RankDistributionView(study, live=False)
    explorer = view.explorer()
    assert not explorer["layout"].get("sliders")
    (menu,) = [m for m in explorer["layout"]["updatemenus"] if m.get("name") == "corpus"]
    assert menu["type"] == "dropdown" and menu["visible"]
    assert [b["label"] for b in menu["buttons"]] == [f"corpus: {c}" for c in study.corpora]
    frames = {f["name"]: f for f in explorer["frames"]}
    for corpus, button in zip(study.corpora, menu["buttons"], strict=True):
        assert button["method"] == "animate"
        (name,) = button["args"][0]
        assert corpus in frames[name]["layout"]["title"]["text"]


def test_all_corpora_is_offered_only_when_there_are_several() -> None:
    """Of one corpus, "(all corpora)" drew what the corpus does: the report's explorer offered two
    choices that showed the same figure."""
    one = synthetic_study(n_tokens=500, corpora=("a",), sizes=(1e5, 1e6, 1e7))
    two = synthetic_study(n_tokens=500, corpora=("a", "b"), sizes=(1e5, 1e6, 1e7))
    for view in (widgets.ScalingView, widgets.KSweepView):
        assert list(view(one, live=False).corpus_dropdown.options) == ["a"]
        assert list(view(two, live=False).corpus_dropdown.options) == [base.ALL_CORPORA, "a", "b"]
    assert widgets.KSweepView(one, live=False).corpus_dropdown.value == "a"  # it opens on all of them
    assert widgets.KSweepView(two, live=False).corpus_dropdown.value == base.ALL_CORPORA
