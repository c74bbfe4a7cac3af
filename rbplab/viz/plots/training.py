"""Training dynamics: loss against tokens seen D per size with each size's fitted power law in D,
loss against S at one checkpoint, and iso-loss contours of a fitted joint law L(S, D) with its
compute-optimal frontier."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.analysis.data_scaling import data_law_curves
from rbplab.core.display import size
from rbplab.viz.labels import html_label
from rbplab.viz.layout import Panels, arrange, panel_titles, retitle_panel, sequential
from rbplab.viz.plots.traces import (
    S_TITLE,
    add_pending,
    grid_note,
    line_trace,
    require_columns,
    subplots,
    vline,
    with_interval,
)

FRONTIER_COLOURS = ("#d62728", "#111111", "#ff7f0e", "#e377c2")  # all visible on Viridis and on white


def _size_label(S: float) -> str:
    return f"S = {size(S)}"


def training_dynamics(
    points: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    *,
    y: str = "neg_log_rbp",
    y_label: str = "-log RBP_k",
    step: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """Loss against tokens seen D per size (left) and against S at one training step (right).

    points: S, D, step and the loss column `y` (one corpus and k: a `rbplab.study.training.table`
    selection); fits: `rbplab.analysis.data_scaling.data_fits` rows (S, beta, prefactor, r2 and
    the interval of beta), drawn as dashed power laws over each size's D range. Sizes are on the
    sequential colour scale (dark: smallest). `step` is the checkpoint drawn on the right and
    marked by a dotted line on the left (default: the last step every size reached)."""
    require_columns(points, ["S", "D", "step", y], "points")
    points = points[points["D"] > 0]
    sizes = sorted(points["S"].unique())
    colours = sequential(sizes)
    if step is None and len(points):
        reached = points.groupby("step")["S"].nunique()
        step = float(reached[reached == reached.max()].index.max())
    y_label = html_label(y_label)
    fig = subplots(1, 2, shared_yaxes=True)
    pending: list = []
    fits = fits if fits is not None and len(fits) else None
    curves = data_law_curves(fits, points) if fits is not None else None
    for S in sizes:
        colour = colours[float(S)]
        sel = points[points["S"] == S].sort_values("D")
        curve = curves[curves["S"] == S] if curves is not None else ()
        fitted = len(curve) > 0
        pending.append(
            (
                go.Scatter(
                    x=sel["D"],
                    y=sel[y],
                    mode="markers+lines",
                    line={"color": colour, "width": 1},
                    marker={"color": colour, "size": 7},
                    text=sel["step"],
                    hovertemplate="step %{text}<br>D=%{x:.3s}<br>loss=%{y:.4f}<extra></extra>",
                    name=_size_label(S),
                    legendgroup=str(S),
                    showlegend=not fitted,  # one legend entry per size: its fit's, when it has one
                    meta="points",
                ),
                1,
                1,
            )
        )
        if fitted:
            row = fits[fits["S"] == S].iloc[0]
            name = f"{_size_label(S)}: β = {with_interval(row, 'beta')}, R² = {row['r2']:.3f}"
            pending.append(
                (line_trace(curve["D"], curve["fitted"], colour, name, str(S), "fit", dash="dash"), 1, 1)
            )
    if step is not None:
        at = points[points["step"] == step].sort_values("S")
        pending.append(
            (
                go.Scatter(
                    **_step_values(at, y, step),
                    mode="markers+lines",
                    marker={"color": [colours[float(s)] for s in at["S"]], "size": 10, "line": {"width": 1}},
                    line={"color": "#555", "width": 1},
                    meta="step",
                ),
                1,
                2,
            )
        )
        if len(at):
            fig.update_layout(shapes=[vline(1, float(at["D"].iloc[0]))])
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="tokens seen D", row=1, col=1)
    fig.update_xaxes(title_text=S_TITLE, row=1, col=2)
    return arrange(
        fig,
        Panels(cols=2, panel_height=380),
        title=title or f"{y_label} over training",
        caption=grid_note(points) or None,
        panel_titles=["vs tokens seen D", _size_panel_title(step)],
        y_title=y_label,
    )


def _size_panel_title(step: float | None) -> str:
    return "vs size S" + ("" if step is None else f" at step {step:,.0f}")


def _step_values(at: pd.DataFrame, y: str, step: float) -> dict:
    # What the step's trace changes with the step: shared by the full build and `move_step`.
    return {"x": at["S"], "y": at[y], "name": f"at step {step:,.0f}"}


def move_step(fig: go.Figure, points: pd.DataFrame, y: str, step: float) -> bool:
    """Move a `training_dynamics` figure of `points` (the ones it was drawn from, `y` its loss
    column) to another `step` in place: the step's trace on the right, its line on the left and
    the right panel's title; what `training_dynamics(points, ..., step=step)` would draw, without
    rebuilding the fits and every size's checkpoints (a slider step of notebook 06's view costs
    then a few traces, whatever the number of checkpoints). Returns False, changing nothing, when
    the figure has no step trace, or the sizes that reached `step` are not those it shows (the
    S axis' ticks are laid out for those): the caller draws it whole."""
    points = points[points["D"] > 0]
    at = points[points["step"] == step].sort_values("S")
    slots = [i for i, trace in enumerate(fig.data) if trace.meta == "step"]
    if len(slots) != 1 or len(panel_titles(fig)) != 2 or not len(at):
        return False
    shown = fig.data[slots[0]].x
    if shown is None or not np.array_equal(np.asarray(shown, dtype=float), at["S"].to_numpy(dtype=float)):
        return False  # other sizes reached this step: the S axis' ticks follow them, a full build
    colours = sequential(sorted(points["S"].unique()))
    values = _step_values(at, y, step)
    with fig.batch_update():
        fig.data[slots[0]].update(values, marker={"color": [colours[float(s)] for s in at["S"]]})
        fig.layout.shapes = [vline(1, float(at["D"].iloc[0]))]
        retitle_panel(fig, 1, _size_panel_title(step))
    return True


def iso_loss(
    surface: pd.DataFrame,
    frontiers: pd.DataFrame | None = None,
    points: pd.DataFrame | None = None,
    *,
    loss_label: str = "loss",
    title: str | None = None,
) -> go.Figure:
    """Iso-loss contours of a fitted law L(S, D) over log10 D (x) and log10 S (y), with the
    compute-optimal frontier of one or more quantities drawn on it.

    surface: S, D, loss on a full grid (`rbplab.analysis.data_scaling.law_surface`);
    frontiers: quantity, S_opt, D_opt (`data_scaling.frontier` rows, a `quantity` column added),
    one line each, clipped to the surface's range; points: S, D of the measured checkpoints."""
    require_columns(surface, ["S", "D", "loss"], "surface")
    grid = surface.pivot_table(index="S", columns="D", values="loss", sort=True)
    fig = go.Figure(
        go.Contour(
            x=np.log10(grid.columns.to_numpy(np.float64)),
            y=np.log10(grid.index.to_numpy(np.float64)),
            z=grid.to_numpy(np.float64),
            colorscale="Viridis",
            contours={"coloring": "heatmap", "showlabels": True},
            colorbar={"title": {"text": html_label(loss_label)}},
            name=loss_label,
            showlegend=False,
            meta="surface",
            hovertemplate="log10 D=%{x:.2f}<br>log10 S=%{y:.2f}<br>loss=%{z:.4f}<extra></extra>",
        )
    )
    traces = []
    if frontiers is not None and len(frontiers):
        require_columns(frontiers, ["quantity", "S_opt", "D_opt"], "frontiers")
        s_lo, s_hi = surface["S"].min(), surface["S"].max()
        d_lo, d_hi = surface["D"].min(), surface["D"].max()
        for i, (quantity, part) in enumerate(frontiers.groupby("quantity", sort=False)):
            inside = part[part["S_opt"].between(s_lo, s_hi) & part["D_opt"].between(d_lo, d_hi)]
            traces.append(
                go.Scatter(
                    x=np.log10(inside["D_opt"].to_numpy(np.float64)),
                    y=np.log10(inside["S_opt"].to_numpy(np.float64)),
                    mode="lines",
                    line={"color": FRONTIER_COLOURS[i % len(FRONTIER_COLOURS)], "width": 3, "dash": "dash"},
                    name=f"compute-optimal frontier: {quantity}",
                    meta="frontier",
                )
            )
    if points is not None and len(points):
        pts = points[points["D"] > 0].drop_duplicates(["S", "D"])
        traces.append(
            go.Scatter(
                x=np.log10(pts["D"].to_numpy(np.float64)),
                y=np.log10(pts["S"].to_numpy(np.float64)),
                mode="markers",
                marker={"color": "#111111", "size": 7, "line": {"color": "white", "width": 1}},
                name="checkpoints",
                meta="points",
            )
        )
    if traces:
        fig.add_traces(traces)
    outside = [t.name.split(": ", 1)[1] for t in traces if t.meta == "frontier" and not len(t.x)]
    fig.update_xaxes(title_text="log<sub>10</sub> tokens seen D")
    fig.update_yaxes(title_text="log<sub>10</sub> non-embedding parameters S")
    return arrange(
        fig,
        Panels(panel_height=440),
        title=title or f"Fitted {loss_label}: iso-loss contours and the compute-optimal frontier",
        caption=grid_note(points) if points is not None and len(points) else None,
        subtitle=f"the frontier of {', '.join(outside)} lies outside the fitted range" if outside else None,
        colorbar=True,
    )
