"""Plotly figure builders for the paper's figures.

Every builder is a pure function of tidy DataFrames (the ones `rbplab.study.study` produces):
it only reshapes and draws, never computes statistics, so the same builder serves the
static report and the interactive widgets (which copy a freshly built figure's traces
into a live FigureWidget).

Column conventions (extra columns are ignored):
  points : family, corpus, model, S, k, rbp, neg_log_rbp [, neg_log_rbp_lo, neg_log_rbp_hi]
  fits   : family, corpus, k, alpha, r2
  bands  : family, corpus, k, S, fit, lo, hi            (on the -log RBP_k scale)
  ksweep : family, corpus, k, alpha, r2 [, alpha_ci_low, alpha_ci_high]

The emergence figures (paper Figure 7) are built in `rbplab.viz.plots_emergence`, the
lognormal-theory figures (paper Figure 8) in `rbplab.viz.plots_theory`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.subplots import make_subplots

PALETTE = qualitative.Plotly + qualitative.D3
TEMPLATE = pio.templates["plotly_white"]  # looked up once: by name it is rebuilt per figure
REGIME_COLOURS = {"k = 1": "rgba(99,110,250,0.08)", "1 < k <= 100": "rgba(0,204,150,0.08)"}


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}; it has {list(frame.columns)}")


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _fmt_k(k: float) -> str:
    return f"{int(k):,}" if float(k).is_integer() else f"{k:g}"


def _line_label(fit_row: pd.Series | None, prefix: str) -> str:
    if fit_row is None:
        return prefix
    return f"{prefix} α={fit_row['alpha']:.3f} R²={fit_row['r2']:.3f}"


def _log_axes(fig: go.Figure, rows: int, cols: int, *, x_log: bool = True, y_log: bool = True) -> None:
    # One call per axis kind: per-subplot updates cost a validation pass each.
    if x_log:
        fig.update_xaxes(type="log")
    if y_log:
        fig.update_yaxes(type="log")


def _error_bars(frame: pd.DataFrame, value: str, low: str, high: str) -> dict | None:
    """Asymmetric error bars from interval columns, or None when the frame has none."""
    if not {low, high} <= set(frame.columns):
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (frame[high] - frame[value]).to_numpy(),
        "arrayminus": (frame[value] - frame[low]).to_numpy(),
    }


def _flush(fig: go.Figure, pending: list) -> None:
    """Add collected (trace, row, col) in one call (adding them one by one re-validates the figure each
    time, which made widget callbacks sluggish)."""
    if pending:
        traces, rows, cols = zip(*pending, strict=True)
        fig.add_traces(list(traces), rows=list(rows), cols=list(cols))


def rbp_vs_size(
    points: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    bands: pd.DataFrame | None = None,
    *,
    title: str | None = None,
) -> go.Figure:
    """-log RBP_k against non-embedding size S on log-log axes (paper Figures 3-5).

    One subplot per (k, corpus), one colour per family: markers for models (with error
    bars when the points carry bootstrap intervals), the fitted power law as a line
    labelled with α and R², and its confidence band as a shaded area."""
    _require(points, ["family", "corpus", "model", "S", "k", "neg_log_rbp"], "points")
    ks = sorted(points["k"].unique())
    corpora = list(dict.fromkeys(points["corpus"]))
    families = list(dict.fromkeys(points["family"]))
    titles = [f"{c} · k={_fmt_k(k)}" for k in ks for c in corpora]
    fig = make_subplots(
        rows=len(ks), cols=len(corpora), subplot_titles=titles, shared_xaxes=True, vertical_spacing=0.08
    )
    pending: list = []
    for r, k in enumerate(ks, start=1):
        for c, corpus in enumerate(corpora, start=1):
            for f, family in enumerate(families):
                colour = _colour(f)
                sel = points[(points["k"] == k) & (points["corpus"] == corpus) & (points["family"] == family)]
                sel = sel.sort_values("S")
                fit_row = None
                if fits is not None and len(fits):
                    fr = fits[(fits["k"] == k) & (fits["corpus"] == corpus) & (fits["family"] == family)]
                    fit_row = fr.iloc[0] if len(fr) else None
                group = f"{family}|{corpus}|{k}"
                if bands is not None and len(bands):
                    b = bands[(bands["k"] == k) & (bands["corpus"] == corpus) & (bands["family"] == family)]
                    b = b.sort_values("S")
                    if len(b):
                        pending.append(
                            (
                                go.Scatter(
                                    x=np.r_[b["S"], b["S"][::-1]],
                                    y=np.r_[b["hi"], b["lo"][::-1]],
                                    fill="toself",
                                    fillcolor=colour,
                                    opacity=0.15,
                                    line={"width": 0},
                                    hoverinfo="skip",
                                    showlegend=False,
                                    legendgroup=group,
                                    name=f"{family} band",
                                ),
                                r,
                                c,
                            )
                        )
                        pending.append(
                            (
                                go.Scatter(
                                    x=b["S"],
                                    y=b["fit"],
                                    mode="lines",
                                    line={"color": colour, "dash": "dash"},
                                    name=_line_label(fit_row, f"{family} fit"),
                                    legendgroup=group,
                                ),
                                r,
                                c,
                            )
                        )
                error_y = _error_bars(sel, "neg_log_rbp", "neg_log_rbp_lo", "neg_log_rbp_hi")
                pending.append(
                    (
                        go.Scatter(
                            x=sel["S"],
                            y=sel["neg_log_rbp"],
                            mode="markers",
                            marker={"color": colour, "size": 9},
                            error_y=error_y,
                            text=sel["model"],
                            hovertemplate="%{text}<br>S=%{x:.3s}<br>-log RBP=%{y:.4f}<extra></extra>",
                            name=f"{family} ({corpus}, k={_fmt_k(k)})",
                            legendgroup=group,
                            showlegend=bands is None or not len(bands),
                        ),
                        r,
                        c,
                    )
                )
    _flush(fig, pending)
    _log_axes(fig, len(ks), len(corpora))
    fig.update_xaxes(title_text="non-embedding parameters S", row=len(ks))
    fig.update_yaxes(title_text="-log RBP_k", col=1)
    fig.update_layout(
        title=title or "Relative-based scaling: -log RBP_k vs model size",
        height=320 * len(ks) + 120,
        template=TEMPLATE,
    )
    return fig


def rbp_curves(curves: pd.DataFrame, *, title: str | None = None, marker_k: float | None = None) -> go.Figure:
    """RBP_k as a function of k (log axis) for each model: the CDF of the rank.
    `curves` has columns model, S, corpus, k, rbp."""
    _require(curves, ["model", "S", "corpus", "k", "rbp"], "curves")
    corpora = list(dict.fromkeys(curves["corpus"]))
    fig = make_subplots(rows=1, cols=len(corpora), subplot_titles=corpora, shared_yaxes=True)
    pending: list = []
    models = curves.drop_duplicates("model").sort_values("S")["model"].tolist()
    for c, corpus in enumerate(corpora, start=1):
        for i, model in enumerate(models):
            sel = curves[(curves["corpus"] == corpus) & (curves["model"] == model)].sort_values("k")
            pending.append(
                (
                    go.Scatter(
                        x=sel["k"],
                        y=sel["rbp"],
                        mode="lines",
                        line={"color": _colour(i)},
                        name=model,
                        legendgroup=model,
                        showlegend=c == 1,
                    ),
                    1,
                    c,
                )
            )
    _flush(fig, pending)
    if marker_k is not None:
        fig.add_vline(x=marker_k, line_dash="dot", line_color="grey")
    _log_axes(fig, 1, len(corpora), y_log=False)
    fig.update_xaxes(title_text="k")
    fig.update_yaxes(title_text="RBP_k = Pr(R ≤ k)", col=1)
    fig.update_layout(title=title or "RBP_k against k", template=TEMPLATE, height=420)
    return fig


def ksweep(sweep: pd.DataFrame, *, vocab_size: int | None = None, title: str | None = None) -> go.Figure:
    """R²(k) and α(k) over log-spaced k (paper Figure 6), one line per (family, corpus),
    with the three regimes shaded: k = 1, 1 < k <= 100, and k near |V|."""
    _require(sweep, ["family", "corpus", "k", "alpha", "r2"], "ksweep")
    fig = make_subplots(rows=1, cols=2, subplot_titles=["fit quality R²(k)", "exponent α(k)"])
    pending: list = []
    groups = list(dict.fromkeys(zip(sweep["family"], sweep["corpus"], strict=True)))
    for i, (family, corpus) in enumerate(groups):
        sel = sweep[(sweep["family"] == family) & (sweep["corpus"] == corpus)].sort_values("k")
        name = f"{family} · {corpus}"
        pending.append(
            (
                go.Scatter(
                    x=sel["k"],
                    y=sel["r2"],
                    mode="lines+markers",
                    line={"color": _colour(i)},
                    name=name,
                    legendgroup=name,
                ),
                1,
                1,
            )
        )
        error_y = _error_bars(sel, "alpha", "alpha_ci_low", "alpha_ci_high")
        pending.append(
            (
                go.Scatter(
                    x=sel["k"],
                    y=sel["alpha"],
                    mode="lines+markers",
                    line={"color": _colour(i)},
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    error_y=error_y,
                ),
                1,
                2,
            )
        )
    kmax = vocab_size or float(sweep["k"].max())
    _flush(fig, pending)
    for col in (1, 2):
        fig.add_vrect(x0=0.8, x1=1.25, fillcolor=REGIME_COLOURS["k = 1"], line_width=0, row=1, col=col)
        fig.add_vrect(x0=1.25, x1=100, fillcolor=REGIME_COLOURS["1 < k <= 100"], line_width=0, row=1, col=col)
        if vocab_size:
            fig.add_vline(x=vocab_size, line_dash="dot", line_color="grey", row=1, col=col)
    fig.update_xaxes(type="log", title_text="k", range=[np.log10(0.8), np.log10(kmax * 1.2)])
    fig.update_yaxes(title_text="R²", row=1, col=1)
    fig.update_yaxes(title_text="α", row=1, col=2)
    fig.update_layout(
        title=title or "Scaling fits as a function of k (shaded: k = 1 and 1 < k ≤ 100; dotted: |V|)",
        template=TEMPLATE,
        height=430,
    )
    return fig
