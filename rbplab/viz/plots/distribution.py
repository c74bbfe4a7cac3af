"""The rank distribution and its lognormal theory (paper Figure 8): measured rank frequencies with
the fitted discretised lognormal, the fitted (μ, σ) against S, and cross-entropy beside −log RBP_1,
measured and as the theory predicts them."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from rbplab.core.display import size
from rbplab.viz.layout import Panels, arrange, categorical, sequential
from rbplab.viz.plots.traces import (
    S_TITLE,
    add_pending,
    error_bars,
    grid_note,
    line_trace,
    marked_line_trace,
    marker_trace,
    probability_axis,
    require_columns,
    subplots,
)

POWER_TICKS = {"exponentformat": "power", "showexponent": "all"}  # 10⁻⁴, not SI's "100µ"
# Figure 8ab: one hue per corpus, dark for CE and light for −log RBP_1 (plotly's "Paired" pairs,
# its pale yellow pair left out: invisible on white).
PAIRED = (
    ("#1f78b4", "#a6cee3"),
    ("#33a02c", "#b2df8a"),
    ("#e31a1c", "#fb9a99"),
    ("#ff7f00", "#fdbf6f"),
    ("#6a3d9a", "#cab2d6"),
    ("#b15928", "#e0a36e"),
)


def rank_distribution(pmf: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Empirical rank frequencies and the fitted discretised lognormal, log-log (paper Figure 8c),
    one colour per model on the size scale (dark: smallest)."""
    require_columns(pmf, ["model", "S", "rank", "empirical", "fitted"], "rank pmf")
    fig = go.Figure()
    sizes = pmf.drop_duplicates("model").sort_values("S")
    colours = sequential(sizes["S"])
    traces = []
    for model, S in zip(sizes["model"], sizes["S"], strict=True):
        colour = colours[float(S)]
        sel = pmf[pmf["model"] == model].sort_values("rank")
        emp = sel[sel["empirical"] > 0]
        measured = marker_trace(
            emp["rank"], emp["empirical"], colour, f"{model} measured", model, "empirical", size=4
        )
        traces.append(measured.update(showlegend=False))
        traces.append(
            line_trace(sel["rank"], sel["fitted"], colour, f"{model} (S = {size(S)})", model, "lognormal")
        )
    fig.add_traces(traces)
    fig.update_xaxes(type="log", title_text="rank R of the ground-truth token")
    fig.update_yaxes(type="log", **POWER_TICKS, **probability_axis(True))
    return arrange(
        fig,
        Panels(panel_height=420),
        title=title or "Rank distribution and lognormal fit",
        caption=grid_note(pmf) or None,
        subtitle="markers: measured frequency of each rank bin; lines: fitted discretised lognormal",
        y_title="frequency",
    )


PARAMETER_TITLES = {"mu": "μ", "sigma": "σ", "mu_over_sigma": "μ/σ"}


def lognormal_params(params: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """μ, σ and μ/σ of the fitted lognormal against S (paper Figure 8d), one line per corpus, each
    panel titled by its parameter; intervals drawn when the frame has `<name>_low/_high`."""
    require_columns(params, ["corpus", "S", "mu", "sigma", "mu_over_sigma"], "lognormal params")
    fig = subplots(1, 3)
    pending: list = []
    for i, corpus in enumerate(dict.fromkeys(params["corpus"])):
        sel = params[params["corpus"] == corpus].sort_values("S")
        for col, name in enumerate(PARAMETER_TITLES, start=1):
            line = marked_line_trace(sel["S"], sel[name], categorical(i), str(corpus), str(corpus), name)
            line.update(
                error_y=error_bars(sel, name, f"{name}_low", f"{name}_high"),
                showlegend=col == 1,
                text=sel.get("model"),
            )
            pending.append((line, 1, col))
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    for col, name in enumerate(PARAMETER_TITLES, start=1):
        fig.update_yaxes(title_text=PARAMETER_TITLES[name], row=1, col=col)
    has_intervals = any(f"{n}_low" in params.columns for n in PARAMETER_TITLES)
    return arrange(
        fig,
        Panels(cols=3, panel_height=340, per_axis_y_titles=True),
        title=title or "Lognormal parameters vs model size",
        caption=grid_note(params) or None,
        subtitle=None if has_intervals else "maximum-likelihood fits per model (no interval available)",
        panel_titles=["location μ", "scale σ", "μ/σ"],
        x_title=S_TITLE,
    )


def ce_vs_rbp(ce: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Cross-entropy and -log RBP_1 against S on log-log axes, empirical (markers, left: Figure 8a)
    next to the lognormal theory's predictions from the fitted (μ, σ) (lines, right: Figure 8b)."""
    require_columns(ce, ["corpus", "S", "quantity", "value", "source"], "ce")
    fig = subplots(1, 2)
    pending: list = []
    keys = list(dict.fromkeys(zip(ce["corpus"], ce["quantity"], strict=True)))
    corpora = list(dict.fromkeys(ce["corpus"]))
    for corpus, quantity in keys:
        pair = PAIRED[corpora.index(corpus) % len(PAIRED)]
        shade = 0 if quantity == "CE" else 1  # CE dark, −log RBP_1 light, in the corpus's hue
        symbol = ("square", "circle")[shade]
        for col, source in enumerate(["empirical", "lognormal"], start=1):
            sel = ce[(ce["corpus"] == corpus) & (ce["quantity"] == quantity) & (ce["source"] == source)]
            sel = sel.sort_values("S")
            if not len(sel):
                continue
            name = f"{quantity} · {corpus}"
            pending.append(
                (
                    go.Scatter(
                        x=sel["S"],
                        y=sel["value"],
                        mode="markers+lines" if col == 1 else "lines",
                        line={"color": pair[shade], "dash": "solid" if col == 1 else "dash"},
                        marker={"symbol": symbol, "size": 7},
                        name=name,
                        legendgroup=name,
                        showlegend=col == 1,
                        meta=source,
                    ),
                    1,
                    col,
                )
            )
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="nats per token", row=1, col=1)
    fig.update_yaxes(title_text="nats (theory)", row=1, col=2)
    return arrange(
        fig,
        Panels(cols=2, panel_height=360, per_axis_y_titles=True),
        title=title or "Cross-entropy vs −log RBP<sub>1</sub>",
        caption=grid_note(ce) or None,
        panel_titles=["measured", "lognormal theory (appendix B)"],
        x_title=S_TITLE,
    )
