"""How the law depends on k: RBP_k as a function of k per model (the rank's CDF), and R²(k) and α(k)
over log-spaced k with the regimes shaded (paper Figure 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.core.display import size
from rbplab.viz.layout import Panels, arrange, categorical, sequential
from rbplab.viz.plots.traces import (
    add_pending,
    band_trace,
    format_k,
    grid_note,
    marked_line_trace,
    probability_axis,
    require_columns,
    subplots,
    vline,
    vrect,
    with_interval,
)

REGIME_COLOURS = {"k = 1": "rgba(99,110,250,0.08)", "1 < k <= 100": "rgba(0,204,150,0.08)"}


def rbp_curves(curves: pd.DataFrame, *, title: str | None = None, marker_k: float | None = None) -> go.Figure:
    """RBP_k as a function of k (log axis) for each model: the CDF of the rank, one panel per
    corpus, models coloured by size (dark: smallest). `curves` has columns model, S, corpus, k, rbp."""
    require_columns(curves, ["model", "S", "corpus", "k", "rbp"], "curves")
    corpora = list(dict.fromkeys(curves["corpus"]))
    fig = subplots(1, len(corpora), shared_yaxes=True)
    pending: list = []
    sizes = curves.drop_duplicates("model").sort_values("S")
    colours = sequential(sizes["S"])
    for c, corpus in enumerate(corpora, start=1):
        for model, S in zip(sizes["model"], sizes["S"], strict=True):
            sel = curves[(curves["corpus"] == corpus) & (curves["model"] == model)].sort_values("k")
            pending.append(
                (
                    go.Scatter(
                        x=sel["k"],
                        y=sel["rbp"],
                        mode="lines",
                        line={"color": colours[float(S)]},
                        name=f"{model} (S = {size(S)})",
                        legendgroup=model,
                        showlegend=c == 1,
                        meta="model",
                    ),
                    1,
                    c,
                )
            )
    add_pending(fig, pending)
    if marker_k is not None:
        # Shapes as plain dicts set once: add_vline per panel re-validates the figure each time.
        fig.update_layout(shapes=[vline(c, marker_k) for c in range(1, len(corpora) + 1)])
    fig.update_xaxes(type="log")
    fig.update_yaxes(**probability_axis(False))
    return arrange(
        fig,
        Panels(cols=len(corpora), panel_height=380),
        title=title or "RBP<sub>k</sub> against k",
        caption=grid_note(curves) or None,
        panel_titles=corpora if len(corpora) > 1 else None,
        x_title="k",
        y_title="RBP<sub>k</sub> = Pr(R ≤ k)",
    )


def ksweep(
    sweep: pd.DataFrame,
    *,
    vocab_size: int | None = None,
    title: str | None = None,
    marker_k: float | None = None,
) -> go.Figure:
    """R²(k) and α(k) over log-spaced k (paper Figure 6), one line per (family, corpus),
    with the three regimes shaded: k = 1, 1 < k <= 100, and k near |V|. `marker_k` marks one k
    (the k-sweep view's slider): a dotted line in both panels and a marker on every curve."""
    require_columns(sweep, ["family", "corpus", "k", "alpha", "r2"], "ksweep")
    fig = subplots(1, 2)
    pending: list = []
    groups = list(dict.fromkeys(zip(sweep["family"], sweep["corpus"], strict=True)))
    several_families = sweep["family"].nunique() > 1
    for i, (family, corpus) in enumerate(groups):
        sel = sweep[(sweep["family"] == family) & (sweep["corpus"] == corpus)].sort_values("k")
        name = f"{family} · {corpus}" if several_families else str(corpus)
        colour = categorical(i)
        at = None
        if marker_k is not None and len(sel):
            at = sel.iloc[[int(np.argmin(np.abs(np.log(sel["k"].to_numpy(float)) - np.log(marker_k))))]]
        label = name
        if at is not None:  # the legend states the marked values: α with its interval, and R²
            row = at.iloc[0]
            label = (
                f"{name} at k={format_k(row['k'])}: α = {with_interval(row, 'alpha')}, R² = {row['r2']:.3f}"
            )
        pending.append((marked_line_trace(sel["k"], sel["r2"], colour, label, name, "r2", size=4), 1, 1))
        if {"alpha_low", "alpha_high"} <= set(sel.columns) and sel["alpha_low"].notna().any():
            # The interval as a faint band: error bars of several curves over 30+ ks overprint.
            ok = sel[sel["alpha_low"].notna() & sel["alpha_high"].notna()]
            band = band_trace(
                ok["k"], ok["alpha_low"], ok["alpha_high"], colour, f"{name} interval", name, "alpha interval"
            )
            pending.append((band, 1, 2))
        alpha = marked_line_trace(sel["k"], sel["alpha"], colour, name, name, "alpha", size=4)
        alpha.update(
            showlegend=False,
            customdata=sel[["alpha_low", "alpha_high"]] if "alpha_low" in sel.columns else None,
            hovertemplate="k=%{x}<br>α=%{y:.4f}"
            + (" [%{customdata[0]:.4f}, %{customdata[1]:.4f}]" if "alpha_low" in sel.columns else "")
            + "<extra>%{fullData.name}</extra>",
        )
        pending.append((alpha, 1, 2))
        if at is not None:
            for col, y in ((1, "r2"), (2, "alpha")):
                pending.append(
                    (
                        go.Scatter(
                            x=at["k"],
                            y=at[y],
                            mode="markers",
                            marker={"color": colour, "size": 13, "symbol": "diamond", "line": {"width": 1.5}},
                            name=f"{name} at k={format_k(marker_k)}",
                            legendgroup=name,
                            showlegend=False,
                            meta="marker",
                        ),
                        1,
                        col,
                    )
                )
    kmax = vocab_size or float(sweep["k"].max())
    add_pending(fig, pending)
    shapes = []
    for col in (1, 2):
        shapes.append(vrect(col, 0.8, 1.25, REGIME_COLOURS["k = 1"]))
        shapes.append(vrect(col, 1.25, 100, REGIME_COLOURS["1 < k <= 100"]))
        if vocab_size:
            shapes.append(vline(col, vocab_size))
        if marker_k is not None:
            shapes.append(vline(col, marker_k, colour="black", dash="dash"))
    fig.update_layout(shapes=shapes)
    fig.update_xaxes(type="log", range=[np.log10(0.8), np.log10(kmax * 1.2)])
    fig.update_yaxes(title_text="R²", row=1, col=1)
    fig.update_yaxes(title_text="α", row=1, col=2)
    banded = {"alpha_low", "alpha_high"} <= set(sweep.columns)
    subtitle = (
        "shaded: k = 1 and 1 < k ≤ 100; dotted: |V|"
        + ("; bands: 95 % CI of α" if banded else "")
        + ("; dashed: the chosen k (values in legend)" if marker_k is not None else "")
    )
    return arrange(
        fig,
        Panels(cols=2, panel_height=360, per_axis_y_titles=True),
        title=title or "Scaling fits as a function of k",
        caption=grid_note(sweep) or None,
        subtitle=subtitle,
        panel_titles=["fit quality R²(k)", "exponent α(k)"],
        x_title="k",
    )
