"""Training-dynamics figures carry exactly the data of their frames; the view redraws in place."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.analysis import data_scaling
from rbplab.study.study import synthetic_training_table
from rbplab.viz import plots
from rbplab.viz.widgets import TrainingView


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
