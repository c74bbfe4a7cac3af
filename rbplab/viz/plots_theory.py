"""Plotly figure builders for the lognormal theory of ranks (paper Figure 8).

Like `rbplab.viz.plots` (whose palette, template and trace helpers they share), every builder
is a pure function of tidy DataFrames from `rbplab.study.study`: it only reshapes and draws.

Column conventions (extra columns are ignored):
  lognormal pmf : model, S, rank, empirical, fitted
  lognormal params : family, corpus, model, S, mu, sigma, mu_over_sigma
  ce : family, corpus, model, S, quantity, value, source   (source: empirical | lognormal)
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rbplab.viz.plots import TEMPLATE, _colour, _flush, _log_axes, _require


def rank_distribution(pmf: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Empirical rank frequencies and the fitted discretised lognormal, log-log (paper Figure 8c)."""
    _require(pmf, ["model", "S", "rank", "empirical", "fitted"], "rank pmf")
    fig = go.Figure()
    models = pmf.drop_duplicates("model").sort_values("S")["model"].tolist()
    for i, model in enumerate(models):
        sel = pmf[pmf["model"] == model].sort_values("rank")
        emp = sel[sel["empirical"] > 0]
        fig.add_trace(
            go.Scatter(
                x=emp["rank"],
                y=emp["empirical"],
                mode="markers",
                marker={"color": _colour(i), "size": 4},
                name=f"{model} empirical",
                legendgroup=model,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=sel["rank"],
                y=sel["fitted"],
                mode="lines",
                line={"color": _colour(i)},
                name=f"{model} lognormal",
                legendgroup=model,
            )
        )
    fig.update_xaxes(type="log", title_text="rank R of the ground-truth token")
    fig.update_yaxes(type="log", title_text="frequency")
    fig.update_layout(title=title or "Rank distribution and lognormal fit", template=TEMPLATE, height=450)
    return fig


def lognormal_params(params: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """μ, σ and μ/σ of the fitted lognormal against S (paper Figure 8d), one line per corpus."""
    _require(params, ["corpus", "S", "mu", "sigma", "mu_over_sigma"], "lognormal params")
    fig = make_subplots(rows=1, cols=3, subplot_titles=["μ", "σ", "μ/σ"])
    pending: list = []
    for i, corpus in enumerate(dict.fromkeys(params["corpus"])):
        sel = params[params["corpus"] == corpus].sort_values("S")
        for col, name in enumerate(["mu", "sigma", "mu_over_sigma"], start=1):
            pending.append(
                (
                    go.Scatter(
                        x=sel["S"],
                        y=sel[name],
                        mode="lines+markers",
                        line={"color": _colour(i)},
                        name=str(corpus),
                        legendgroup=str(corpus),
                        showlegend=col == 1,
                        text=sel.get("model"),
                    ),
                    1,
                    col,
                )
            )
    _flush(fig, pending)
    fig.update_xaxes(type="log", title_text="S")
    fig.update_layout(title=title or "Lognormal parameters vs model size", template=TEMPLATE, height=400)
    return fig


def ce_vs_rbp(ce: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Cross-entropy and -log RBP_1 against S on log-log axes, empirical (markers, left: Figure 8a)
    next to the lognormal theory's predictions from the fitted (μ, σ) (lines, right: Figure 8b)."""
    _require(ce, ["corpus", "S", "quantity", "value", "source"], "ce")
    fig = make_subplots(rows=1, cols=2, subplot_titles=["empirical", "lognormal theory (appendix B)"])
    pending: list = []
    keys = list(dict.fromkeys(zip(ce["corpus"], ce["quantity"], strict=True)))
    for i, (corpus, quantity) in enumerate(keys):
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
                        line={"color": _colour(i), "dash": "solid" if col == 1 else "dash"},
                        name=name,
                        legendgroup=name,
                        showlegend=col == 1,
                    ),
                    1,
                    col,
                )
            )
    _flush(fig, pending)
    _log_axes(fig, 1, 2)
    fig.update_xaxes(title_text="S")
    fig.update_yaxes(title_text="loss (nats)", col=1)
    fig.update_layout(title=title or "Cross-entropy vs -log RBP_1", template=TEMPLATE, height=420)
    return fig
