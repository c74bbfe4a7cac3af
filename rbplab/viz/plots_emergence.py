"""Plotly figure builders for emergence: sequence success p_{N,k} against size (paper Figure 7).

Like `rbplab.viz.plots` (whose palette, template and trace helpers they share), every builder
is a pure function of the tidy frame from `Study.emergence`: it only reshapes and draws.

Column conventions (extra columns are ignored):
  emergence : model, S, k, N, p_pred, p_emp [, p_fit, corpus]
  linearised : k, N, x, neg_log_p_emp, neg_log_p_pred [, corpus]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rbplab.viz.plots import TEMPLATE, _colour, _flush, _fmt_k, _log_axes, _require


def _corpus_k_grid(frame: pd.DataFrame) -> tuple[list, list, list[str]]:
    corpora = list(dict.fromkeys(frame["corpus"])) if "corpus" in frame.columns else [None]
    ks = sorted(frame["k"].unique())
    titles = [f"{c} · k={_fmt_k(k)}" if c is not None else f"k={_fmt_k(k)}" for c in corpora for k in ks]
    return corpora, ks, titles


def _cell(frame: pd.DataFrame, corpus: object, k: float) -> pd.DataFrame:
    sel = frame[frame["k"] == k]
    return sel if corpus is None else sel[sel["corpus"] == corpus]


def emergence(em: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Sequence success p_{N,k} against S (the sigmoid view of paper Figure 7): one subplot per
    (corpus, k), one colour per N; markers are the empirical fraction of N-token runs all within
    the top k, solid lines the independence prediction RBP_k^N, dashed lines the fitted
    exp(-C N S^-α)."""
    _require(em, ["model", "S", "k", "N", "p_pred", "p_emp"], "emergence")
    corpora, ks, titles = _corpus_k_grid(em)
    ns = sorted(em["N"].unique())
    fig = make_subplots(rows=len(corpora), cols=len(ks), subplot_titles=titles, shared_yaxes=True)
    pending: list = []
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            cell = _cell(em, corpus, k)
            first = r == 1 and c == 1
            for i, n in enumerate(ns):
                sel = cell[cell["N"] == n].sort_values("S")
                colour = _colour(i)
                pending.append(
                    (
                        go.Scatter(
                            x=sel["S"],
                            y=sel["p_emp"],
                            mode="markers",
                            marker={"color": colour, "size": 8},
                            name=f"N={n} empirical",
                            legendgroup=f"N{n}",
                            showlegend=first,
                            text=sel["model"],
                            hovertemplate="%{text}<br>S=%{x:.3s}<br>p=%{y:.3g}<extra>empirical</extra>",
                        ),
                        r,
                        c,
                    )
                )
                pending.append(
                    (
                        go.Scatter(
                            x=sel["S"],
                            y=sel["p_pred"],
                            mode="lines",
                            line={"color": colour},
                            name=f"N={n} RBP_k^N",
                            legendgroup=f"N{n}",
                            showlegend=first,
                        ),
                        r,
                        c,
                    )
                )
                if "p_fit" in sel.columns and sel["p_fit"].notna().any():
                    pending.append(
                        (
                            go.Scatter(
                                x=sel["S"],
                                y=sel["p_fit"],
                                mode="lines",
                                line={"color": colour, "dash": "dash"},
                                name=f"N={n} exp(-C N S^-α)",
                                legendgroup=f"N{n}",
                                showlegend=first,
                            ),
                            r,
                            c,
                        )
                    )
    _flush(fig, pending)
    _log_axes(fig, len(corpora), len(ks), y_log=False)
    fig.update_xaxes(title_text="non-embedding parameters S", row=len(corpora))
    fig.update_yaxes(title_text="p_{N,k}", col=1)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_layout(
        title=title or "Emergence: sequence success p_{N,k} vs size (markers empirical, lines predicted)",
        template=TEMPLATE,
        height=330 * len(corpora) + 120,
    )
    return fig


def emergence_linearised(em: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """The linearised view of Figure 7: -log p_{N,k} against N·S^-α (column `x`), where the
    law predicts one straight line per (corpus, k). Needs columns k, N, x, neg_log_p_emp,
    neg_log_p_pred (and corpus for one row of subplots per corpus)."""
    _require(em, ["k", "N", "x", "neg_log_p_emp", "neg_log_p_pred"], "emergence (linearised)")
    corpora, ks, titles = _corpus_k_grid(em)
    fig = make_subplots(rows=len(corpora), cols=len(ks), subplot_titles=titles)
    pending: list = []
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            sel = _cell(em, corpus, k).sort_values("x")
            first = r == 1 and c == 1
            for i, n in enumerate(sorted(sel["N"].unique())):
                s = sel[(sel["N"] == n) & np.isfinite(sel["neg_log_p_emp"])]
                pending.append(
                    (
                        go.Scatter(
                            x=s["x"],
                            y=s["neg_log_p_emp"],
                            mode="markers",
                            marker={"color": _colour(i)},
                            name=f"N={n}",
                            legendgroup=f"N{n}",
                            showlegend=first,
                        ),
                        r,
                        c,
                    )
                )
            pending.append(
                (
                    go.Scatter(
                        x=sel["x"],
                        y=sel["neg_log_p_pred"],
                        mode="lines",
                        line={"color": "black", "dash": "dot"},
                        name="independence: N·(-log RBP_k)",
                        showlegend=first,
                    ),
                    r,
                    c,
                )
            )
    _flush(fig, pending)
    _log_axes(fig, len(corpora), len(ks))
    fig.update_xaxes(title_text="N · S^-α", row=len(corpora))
    fig.update_yaxes(title_text="-log p_{N,k}", col=1)
    fig.update_layout(
        title=title or "Emergence, linearised: -log p_{N,k} vs N·S^-α",
        template=TEMPLATE,
        height=330 * len(corpora) + 120,
    )
    return fig
