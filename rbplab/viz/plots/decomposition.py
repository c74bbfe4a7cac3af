"""The cross-entropy decomposition CE = EE + SA − Conf (beyond the paper): each term against S, and
each model's CE split into its terms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.core.display import size
from rbplab.viz.layout import Panels, arrange, categorical
from rbplab.viz.plots.traces import (
    S_TITLE,
    add_pending,
    grid_note,
    marked_line_trace,
    require_columns,
    subplots,
)

DECOMPOSITION_TITLES = {"ee": "error entropy EE", "sa": "self-alignment SA", "conf": "confidence Conf"}


def decomposition_vs_size(dec: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """EE, SA and Conf (nats) against S, one panel per term and one line per corpus
    (`rbplab.study.decomposition.table`). SA and Conf depend on the number of tokens, so the legend states
    each corpus's token count: compare those two terms across corpora only at equal counts."""
    require_columns(dec, ["corpus", "S", "n_tokens", *DECOMPOSITION_TITLES], "decomposition")
    fig = subplots(1, 3)
    pending: list = []
    for i, corpus in enumerate(dict.fromkeys(dec["corpus"])):
        sel = dec[dec["corpus"] == corpus].sort_values("S")
        name = f"{corpus} ({size(sel['n_tokens'].iloc[0])} tokens)"
        for col, term in enumerate(DECOMPOSITION_TITLES, start=1):
            line = marked_line_trace(sel["S"], sel[term], categorical(i), name, str(corpus), term)
            line.update(
                showlegend=col == 1,
                text=sel.get("model"),
                hovertemplate="%{text}<br>S=%{x:.3s}<br>%{y:.4f} nats<extra></extra>",
            )
            pending.append((line, 1, col))
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    for col in range(1, 4):
        fig.update_yaxes(title_text="nats", row=1, col=col)
    return arrange(
        fig,
        Panels(cols=3, panel_height=340, per_axis_y_titles=True),
        title=title or "Cross-entropy decomposition vs model size: CE = EE + SA − Conf",
        caption=grid_note(dec) or None,
        subtitle="SA and Conf grow with the number of tokens: compare them at equal token counts",
        panel_titles=list(DECOMPOSITION_TITLES.values()),
        x_title=S_TITLE,
    )


def decomposition_bars(dec: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """CE of each model split into its terms as stacked bars, one panel per corpus: EE and SA
    stacked upwards, −Conf downwards, so the bars' net height is CE (drawn as a marker)."""
    require_columns(dec, ["corpus", "model", "S", "ce", *DECOMPOSITION_TITLES], "decomposition")
    corpora = list(dict.fromkeys(dec["corpus"]))
    # Two panels a row: four in one left each size label ~30 px, which plotly rotated into the x
    # title (and dropped the last one of).
    cols = min(2, len(corpora))
    rows = -(-len(corpora) // cols)
    fig = subplots(rows, cols, shared_yaxes=True)
    pending: list = []
    parts = (("ee", "EE", 1.0), ("sa", "SA", 1.0), ("conf", "−Conf", -1.0))
    ticks: dict[int, tuple] = {}
    for c, corpus in enumerate(corpora, start=1):
        sel = dec[dec["corpus"] == corpus].sort_values("S")
        labels = np.arange(1, len(sel) + 1)  # numeric positions, named by S on the axis below
        ticks[c] = (labels, [size(s) for s in sel["S"]])
        for i, (term, name, sign) in enumerate(parts):
            pending.append(
                (
                    go.Bar(
                        x=labels,
                        y=sign * sel[term].to_numpy(),
                        name=name,
                        marker={"color": categorical(i)},
                        legendgroup=term,
                        showlegend=c == 1,
                        text=sel["model"],
                        textposition="none",  # the model names are for hovering, not printed on bars
                        hovertemplate="%{text}<br>" + name + " = %{y:.4f} nats<extra></extra>",
                        meta=term,
                    ),
                    1 + (c - 1) // cols,
                    1 + (c - 1) % cols,
                )
            )
        pending.append(
            (
                go.Scatter(
                    x=labels,
                    y=sel["ce"],
                    mode="markers",
                    marker={"color": "black", "symbol": "diamond", "size": 9},
                    name="CE = EE + SA − Conf",
                    legendgroup="ce",
                    showlegend=c == 1,
                    text=sel["model"],
                    hovertemplate="%{text}<br>CE = %{y:.4f} nats<extra></extra>",
                    meta="ce",
                ),
                1 + (c - 1) // cols,
                1 + (c - 1) % cols,
            )
        )
    add_pending(fig, pending)
    fig.update_layout(barmode="relative")
    for c, (values, text) in ticks.items():
        row, col = 1 + (c - 1) // cols, 1 + (c - 1) % cols
        fig.update_xaxes(tickvals=values, ticktext=text, tickangle=0, row=row, col=col)
    return arrange(
        fig,
        Panels(rows=rows, cols=cols, panel_height=260),
        title=title or "Cross-entropy decomposed per model",
        caption=grid_note(dec) or None,
        panel_titles=[str(c) for c in corpora],
        x_title="model (non-embedding parameters S)",
        y_title="nats per token",
    )
