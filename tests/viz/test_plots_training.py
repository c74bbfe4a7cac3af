"""Training-dynamics figures carry exactly the data of their frames; the view redraws in place."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest

from rbplab.analysis import data_scaling
from rbplab.study.synthetic import synthetic_training_table
from rbplab.viz import plots
from rbplab.viz.layout import untemplated
from rbplab.viz.plots.training import move_step
from rbplab.viz.widgets import TrainingView
from rbplab.viz.widgets import training as training_widget
from rbplab.viz.widgets.base import FigureView


@pytest.fixture(scope="module")
def table():
    return synthetic_training_table(ks=(1, 100))


def test_training_dynamics_draws_the_points_and_the_fits(table) -> None:
    sel = table[table["k"] == 1]
    fits = data_scaling.data_fits(sel, y="neg_log_rbp")
    fig = plots.training_dynamics(sel, fits, step=200)
    markers = [t for t in fig.data if t.meta == "points"]
    assert len(markers) == sel["S"].nunique()
    for trace, (S, part) in zip(markers, sel.groupby("S"), strict=True):
        part = part.sort_values("D")
        assert np.allclose(trace.x, part["D"]) and np.allclose(trace.y, part["neg_log_rbp"]), S
    lines = [t for t in fig.data if t.meta == "fit"]
    for trace, row in zip(lines, fits.itertuples(), strict=True):
        assert np.allclose(trace.y, row.prefactor * np.asarray(trace.x) ** -row.beta)
    (at,) = [t for t in fig.data if t.meta == "step"]
    chosen = sel[sel["step"] == 200].sort_values("S")
    assert np.allclose(at.x, chosen["S"]) and np.allclose(at.y, chosen["neg_log_rbp"])


def test_iso_loss_contours_are_the_surface_and_frontiers_lie_inside(table) -> None:
    sel = table[table["k"] == 1]
    fit = data_scaling.fit_joint_law(sel["S"], sel["D"], sel["neg_log_rbp"])
    surface = data_scaling.law_surface(fit, sel["S"], sel["D"], n=12)
    C = np.geomspace(surface["C"].min(), surface["C"].max(), 20)
    front = data_scaling.frontier(fit, C).assign(quantity="RBP_1")
    fig = plots.iso_loss(surface, front, sel)
    (contour,) = [t for t in fig.data if t.meta == "surface"]
    grid = surface.pivot_table(index="S", columns="D", values="loss")
    assert np.allclose(contour.z, grid.to_numpy()) and np.allclose(contour.x, np.log10(grid.columns))
    assert np.allclose(contour.y, np.log10(grid.index))
    (line,) = [t for t in fig.data if t.meta == "frontier"]
    inside = front[front["S_opt"].between(surface["S"].min(), surface["S"].max())]
    inside = inside[inside["D_opt"].between(surface["D"].min(), surface["D"].max())]
    assert len(line.x) == len(inside) > 0 and np.allclose(line.y, np.log10(inside["S_opt"]))
    (pts,) = [t for t in fig.data if t.meta == "points"]
    assert len(pts.x) == len(sel.drop_duplicates(["S", "D"]))


def test_training_view_redraws_in_place_for_k_and_step(table) -> None:
    view = TrainingView(table, live=False)
    assert view.k == 1 and view.step == int(table["step"].max()) and view.updates == 1
    view.set_k(100)
    view.set_step(100)
    assert view.updates == 3
    (at,) = [t for t in view.figure.data if t.meta == "step"]
    chosen = table[(table["k"] == 100) & (table["step"] == 100)].sort_values("S")
    assert np.allclose(at.y, chosen["neg_log_rbp"])
    view.quantity_toggle.value = "ce"
    (at,) = [t for t in view.figure.data if t.meta == "step"]
    assert np.allclose(at.y, chosen["ce"]) and view.updates == 4
    with pytest.raises(ValueError, match="not in the table"):
        view.set_k(7)


def test_training_view_controls_say_what_they_choose(table) -> None:
    """One button per k of the table (a slider of three stops was squeezed to 124 px), and a loss
    toggle that says what each loss is, not the bare symbol "-log RBP_k"."""
    view = TrainingView(table, live=False)
    ks = sorted(int(k) for k in table["k"].unique())
    assert type(view.k_buttons).__name__ == "ToggleButtons"
    assert view.k_buttons.options == tuple((f"k = {k:,}", k) for k in ks)
    labels = [label for label, _ in view.quantity_toggle.options]
    assert [value for _, value in view.quantity_toggle.options] == ["rbp", "ce"]
    assert "-log RBP_k" not in labels and "rank" in labels[0] and "cross-entropy" in labels[1]
    assert view.quantity_toggle.style.button_width == "auto"  # labels are not cut to a fixed width


def _drawn(figure) -> dict:
    return json.loads(pio.to_json(figure, validate=False))


@pytest.mark.parametrize("live", [False, True])
def test_a_step_alone_moves_the_step_in_place_and_draws_what_a_full_build_draws(
    table, live, monkeypatch
) -> None:
    """Moving only the step slider redraws the step's trace, line and panel title in place,
    without building the figure again (its cost then does not grow with the checkpoints), and
    the result is, byte for byte, the figure a full redraw at that step shows."""
    view = TrainingView(table, k=100, live=live)
    steps = [v for _, v in view.step_slider.options]
    built = []
    original = plots.training_dynamics

    def counted(*args, **kwargs):
        built.append(kwargs.get("step"))
        return original(*args, **kwargs)

    monkeypatch.setattr(plots, "training_dynamics", counted)
    for step in steps[::-1]:
        view.set_step(step)
    monkeypatch.undo()
    assert built == [] and view.updates == len(steps)  # the last step was shown already: no redraw
    full = TrainingView(table, k=100, step=steps[0], live=live)
    FigureView.refresh(full)  # a second, full redraw: the shown figure keeps its template
    assert _drawn(view.figure) == _drawn(full.figure)
    (at,) = [t for t in view.figure.data if t.meta == "step"]
    chosen = table[(table["k"] == 100) & (table["step"] == steps[0])].sort_values("S")
    assert np.allclose(at.y, chosen["neg_log_rbp"]) and at.name == f"at step {steps[0]:,}"


def _full(table, live, **values):
    """The figure a view shows after a full redraw at `values` (its second: without a kept
    figure to copy, with the template the first one set)."""
    view = TrainingView(table, live=live, **values)
    view._figures.clear()
    FigureView.refresh(view)
    return _drawn(view.figure)


@pytest.mark.parametrize("live", [False, True])
def test_steps_some_sizes_missed_are_drawn_as_a_full_build_draws(table, live) -> None:
    """The largest size lacks every other checkpoint: where the sizes at a step are not those
    shown, the S axis' ticks change, so the step cannot be moved in place; every step still
    shows exactly what a full redraw at it shows."""
    largest = table["S"].max()
    steps = sorted(table["step"].unique())
    sparse = table[(table["S"] != largest) | table["step"].isin(steps[::2])]
    view = TrainingView(sparse, k=1, live=live)
    for step in [*steps, *steps[::-1]]:
        view.set_step(int(step))
        assert _drawn(view.figure) == _full(sparse, live, k=1, step=int(step)), step


def test_states_copied_from_a_kept_figure_are_the_states_built_whole(table, monkeypatch) -> None:
    """The explorer's states (and a k visited again) are copies of a kept figure with the step
    moved: each is the figure built from nothing, with and without the template, and the
    figure is built once per corpus, loss and k."""
    largest = table["S"].max()
    steps = sorted(int(s) for s in table["step"].unique())
    sparse = table[(table["S"] != largest) | table["step"].isin(steps[::2])]
    view = TrainingView(sparse, k=1, live=False)
    fresh = TrainingView(sparse, k=1, live=False)
    built = []
    original = plots.training_dynamics

    def counted(*args, **kwargs):
        built.append(kwargs.get("step"))
        return original(*args, **kwargs)

    for blank in (False, True):
        for quantity in ("rbp", "ce"):
            for k in (1,):
                for step in steps:
                    with untemplated() if blank else contextlib.nullcontext():
                        monkeypatch.setattr(plots, "training_dynamics", counted)
                        got = _drawn(view.state("known law", quantity, k, step))
                        monkeypatch.undo()
                        fresh._figures.clear()  # nothing to copy: built whole
                        assert got == _drawn(fresh.state("known law", quantity, k, step))
    # Kept per corpus, loss, k and template; the view opened on one of them (rbp, k = 1,
    # templated). The largest size's missing steps are built whole.
    odd = len(steps[1::2])
    assert len(built) == 2 * 2 * (1 + odd) - 1


@pytest.mark.parametrize("corpora", [2, 3, 4])
def test_a_view_keeps_at_most_kept_figures(table, corpora, monkeypatch) -> None:
    """At the bound (3 here), one under and one over: a view keeps one figure per corpus it drew,
    never more than the bound, dropping the oldest."""
    monkeypatch.setattr(training_widget, "KEPT_FIGURES", 3)
    names = [f"c{i}" for i in range(corpora)]
    many = pd.concat([table.assign(corpus=name) for name in names], ignore_index=True)
    view = TrainingView(many, corpus=names[0], live=False)
    for name in names[1:]:
        view.set_corpus(name)
    assert len(view._figures) == min(corpora, 3)
    assert [key[0] for key in view._figures] == names[-3:]


def test_a_step_no_size_reached_is_drawn_whole(table) -> None:
    """Where no size has the chosen step on the shown corpus, nothing can be moved: the view
    draws the figure whole (no step trace points, no line), as it did before."""
    other = table.assign(corpus="other", step=table["step"] + 1, D=table["D"] + 1)
    view = TrainingView(pd.concat([table, other], ignore_index=True), corpus="known law", live=False)
    view.set_step(int(other["step"].min()))
    (at,) = [t for t in view.figure.data if t.meta == "step"]
    assert len(at.x) == 0 and not view.figure.layout.shapes
    view.set_step(int(table["step"].min()))
    (at,) = [t for t in view.figure.data if t.meta == "step"]
    assert len(at.x) == table["S"].nunique() and len(view.figure.layout.shapes) == 1


def test_move_step_refuses_a_figure_without_a_step_trace(table) -> None:
    sel = table[table["k"] == 1]
    fig = plots.training_dynamics(sel)
    fig.data = [t for t in fig.data if t.meta != "step"]
    before = _drawn(fig)
    assert not move_step(fig, sel, "neg_log_rbp", int(sel["step"].max()))
    assert _drawn(fig) == before
