"""Emergence (paper Figure 7): sequence success p_{N,k} against S with the independence prediction
RBP_k^N and the fitted law exp(−C N S^−α), and its linearised view."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.analysis.emergence import sequence_law, sequence_law_range
from rbplab.viz.layout import Panels, arrange, legend_key, sequential
from rbplab.viz.plots.traces import (
    S_TITLE,
    add_pending,
    axis_refs,
    format_k,
    line_trace,
    marker_trace,
    require_columns,
    subplots,
    vrect,
)

P_NK = "p<sub>N,k</sub>"
INDEPENDENCE_DASH, LAW_DASH = "dot", "dash"  # Figure 7's two predictions, told apart by pattern
P_FLOOR = 1e-6  # Figure 7's log axis reaches no lower than this (a measured p of one run in 10⁶)


def _corpus_k_grid(frame: pd.DataFrame) -> tuple[list, list, list[str]]:
    corpora = list(dict.fromkeys(frame["corpus"])) if "corpus" in frame.columns else [None]
    ks = sorted(frame["k"].unique())
    titles = [f"{c} · k={format_k(k)}" if c is not None else f"k={format_k(k)}" for c in corpora for k in ks]
    return corpora, ks, titles


def _cell(frame: pd.DataFrame, corpus: object, k: float) -> pd.DataFrame:
    sel = frame[frame["k"] == k]
    return sel if corpus is None else sel[sel["corpus"] == corpus]


def _law_traces(sel: pd.DataFrame, n: int, colour: str, lo: float, hi: float) -> list:
    """The fitted law exp(-C N S^-α) on a dense grid: dashed over the measured sizes, and
    dashed but faded where it is extrapolated below or above them."""
    row = sel.iloc[0]
    alpha, c = float(row["alpha"]), float(row["prefactor"])
    s_min, s_max = float(sel["S"].min()), float(sel["S"].max())

    def law(s: np.ndarray) -> np.ndarray:
        return np.exp(-sequence_law(c, alpha, n, s))

    inside = np.geomspace(s_min, s_max, 40)
    traces = [
        go.Scatter(
            x=inside,
            y=law(inside),
            mode="lines",
            line={"color": colour, "dash": LAW_DASH},
            name=f"N={n} fitted law",
            legendgroup=f"N{n}",
            showlegend=False,
            meta="law",
            hovertemplate="S=%{x:.3s}<br>p=%{y:.3g}<extra>fitted law</extra>",
        )
    ]
    parts = []
    if lo < s_min:
        parts.append(np.geomspace(lo, s_min, 40))
    if hi > s_max:
        parts.append(np.geomspace(s_max, hi, 80))
    if parts:
        xs = np.concatenate([np.r_[part, np.nan] for part in parts])[:-1]  # a gap over the measured range
        traces.append(
            go.Scatter(
                x=xs,
                y=law(xs),
                mode="lines",
                line={"color": colour, "dash": LAW_DASH, "width": 1.5},
                opacity=0.55,
                connectgaps=False,
                name=f"N={n} fitted law, extrapolated beyond the measured S",
                legendgroup=f"N{n}",
                showlegend=False,
                meta="extrapolation",
                hovertemplate="S=%{x:.3s}<br>p=%{y:.3g}<extra>extrapolated</extra>",
            )
        )
    return traces


def emergence(em: pd.DataFrame, *, title: str | None = None, extrapolate: bool = False) -> go.Figure:
    """Sequence success p_{N,k} against S (the sigmoid view of paper Figure 7): one panel per
    (corpus, k), N on a sequential colour scale; markers are the empirical fraction of N-token
    runs all within the top k, solid lines the independence prediction RBP_k^N, dashed lines the
    fitted exp(-C N S^-α) (needs columns alpha and prefactor; otherwise p_fit at the measured
    sizes). The S axis spans the measured sizes.

    With `extrapolate`, the fitted law also runs beyond the measured sizes (as far as
    `rbplab.analysis.emergence.sequence_law_range` says: until the sigmoid has flattened, at most
    EXTRAPOLATION_DECADES decades), drawn faded and named "extrapolated", with the measured range
    shaded, so the sigmoid's full shape can be seen."""
    require_columns(em, ["model", "S", "k", "N", "p_pred", "p_emp"], "emergence")
    corpora, ks, titles = _corpus_k_grid(em)
    ns = sorted(em["N"].unique())
    colours = sequential(ns)
    has_law = {"alpha", "prefactor"} <= set(em.columns)
    fig = subplots(len(corpora), len(ks), shared_xaxes=True)
    pending: list = []
    measured: list[tuple[int, int, float, float]] = []
    extrapolated = False
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            cell = _cell(em, corpus, k)
            first = r == 1 and c == 1
            lo = hi = None
            if has_law and len(cell) and cell[["alpha", "prefactor"]].notna().all(axis=None):
                s_min, s_max = float(cell["S"].min()), float(cell["S"].max())
                lo, hi = (s_min, s_max)
                if extrapolate:
                    lo, hi = sequence_law_range(
                        s_min, s_max, float(cell["alpha"].iloc[0]), float(cell["prefactor"].iloc[0]), ns
                    )
                    if lo < s_min or hi > s_max:
                        measured.append((r, c, s_min, s_max))
                        extrapolated = True
            for n in ns:
                sel = cell[cell["N"] == n].sort_values("S")
                colour = colours[float(n)]
                hover = "%{text}<br>S=%{x:.3s}<br>p=%{y:.3g}<extra>empirical</extra>"
                dots = marker_trace(sel["S"], sel["p_emp"], colour, f"N={n}", f"N{n}", "empirical", size=8)
                dots.update(showlegend=first, text=sel["model"], hovertemplate=hover)
                independence = line_trace(
                    sel["S"],
                    sel["p_pred"],
                    colour,
                    f"N={n} RBP<sub>k</sub><sup>N</sup>",
                    f"N{n}",
                    "independence",
                    dash=INDEPENDENCE_DASH,
                )
                pending += [(dots, r, c), (independence.update(showlegend=False), r, c)]
                if lo is not None and len(sel):
                    pending.extend((t, r, c) for t in _law_traces(sel, n, colour, lo, hi))
                elif "p_fit" in sel.columns and sel["p_fit"].notna().any():
                    law = line_trace(
                        sel["S"], sel["p_fit"], colour, f"N={n} fitted law", f"N{n}", "law", dash=LAW_DASH
                    )
                    pending.append((law.update(showlegend=False), r, c))
    keys = [
        legend_key(f"markers: measured {P_NK}", mode="markers"),
        legend_key("dotted: independence RBP<sub>k</sub><sup>N</sup>", mode="lines", dash=INDEPENDENCE_DASH),
        legend_key("dashed: fitted law exp(−C N S<sup>−α</sup>)", mode="lines", dash=LAW_DASH),
    ]
    if extrapolated:
        keys.append(
            legend_key(
                "faded: law extrapolated beyond the measured S", mode="lines", dash=LAW_DASH, opacity=0.55
            )
        )
    pending.extend((key, 1, 1) for key in keys)
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    shapes, labels = [], []
    for r, c, s_min, s_max in measured:
        index = (r - 1) * len(ks) + c
        shapes.append(vrect(index, s_min, s_max, "rgba(120,120,120,0.12)"))
        xref, yref = axis_refs(index)
        labels.append(
            {
                "text": "measured",
                "xref": xref,
                "yref": yref,
                "x": np.log10(s_min),  # annotations on a log axis take log10 positions
                "y": 1,
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
                "font": {"size": 11, "color": "#555"},
            }
        )
    if shapes:
        fig.update_layout(shapes=shapes, annotations=labels)
    # p spans decades across N and k: a log axis per panel (a linear 0-1 axis left k = 1 and
    # N >= 4 flat on 0) fitted to the measurements (markers) and the extrapolated law, or with
    # none drawn (all p = 0 at large N) to the predictions (lines), no lower than P_FLOOR. A
    # line's values outside the axis are left out, so it ends where it leaves the panel and
    # every point drawn lies inside the axis at any N (at N = 277 the lines once ran below a
    # range fitted to the markers).
    for r in range(1, len(corpora) + 1):
        for c in range(1, len(ks) + 1):
            traces = [t for t in fig.select_traces(row=r, col=c) if t.y is not None and len(t.y)]
            values = [np.array([np.nan if v is None else v for v in t.y], dtype=float) for t in traces]
            # The extrapolated law is drawn to show its sigmoid: asked for, it widens the axis too.
            asked = ("empirical", "extrapolation")
            marks = [v for t, v in zip(traces, values, strict=True) if t.meta in asked]
            shown = np.concatenate(marks) if marks else np.array([])
            shown = shown[np.isfinite(shown) & (shown >= P_FLOOR)]
            if not len(shown):
                shown = np.concatenate(values) if values else np.array([])
                shown = shown[np.isfinite(shown) & (shown >= P_FLOOR)]
            lo, hi = (float(shown.min()), float(shown.max())) if len(shown) else (P_FLOOR, 1.0)
            bottom, top = lo / 1.6, min(hi * 1.6, 1.05)
            for trace, v in zip(traces, values, strict=True):
                outside = (v < bottom) | (v > top)
                if outside.any():
                    trace.y = np.where(outside, np.nan, v)
            fig.update_yaxes(type="log", range=[np.log10(bottom), np.log10(top)], row=r, col=c)
    default = f"Emergence: sequence success {P_NK} vs size"
    subtitle = (
        "faded dashed: fitted law extrapolated beyond the measured sizes (shaded)"
        if extrapolated
        else "the S axis spans the measured models; extrapolate=True draws the fitted law beyond them"
    )
    return arrange(
        fig,
        Panels(rows=len(corpora), cols=len(ks), panel_height=230, shared_x=True),
        title=title or default + " (log scale)",
        subtitle=subtitle,
        panel_titles=titles,
        x_title=S_TITLE,
        y_title=P_NK,
        legend="right",
    )


def emergence_linearised(em: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """The linearised view of Figure 7: -log p_{N,k} against N·S^-α (column `x`), where the
    law predicts one straight line per (corpus, k). Needs columns k, N, x, neg_log_p_emp,
    neg_log_p_pred (and corpus for one row of panels per corpus)."""
    require_columns(em, ["k", "N", "x", "neg_log_p_emp", "neg_log_p_pred"], "emergence (linearised)")
    corpora, ks, titles = _corpus_k_grid(em)
    colours = sequential(em["N"])
    fig = subplots(len(corpora), len(ks))
    pending: list = []
    listed: set = set()  # each N in the legend once, from the first panel that has it
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            sel = _cell(em, corpus, k).sort_values("x")
            first = r == 1 and c == 1
            measured = sel[np.isfinite(sel["neg_log_p_emp"])]
            if len(measured):  # the prediction where there is a measurement to compare it with
                sel = sel[sel["x"].between(measured["x"].min(), measured["x"].max())]
            for n in sorted(sel["N"].unique()):
                s = sel[(sel["N"] == n) & np.isfinite(sel["neg_log_p_emp"])]
                show = bool(len(s)) and n not in listed
                dots = marker_trace(
                    s["x"], s["neg_log_p_emp"], colours[float(n)], f"N={n}", f"N{n}", "empirical"
                )
                pending.append((dots.update(showlegend=show), r, c))
                if len(s):
                    listed.add(n)
            name = "independence: N · (−log RBP<sub>k</sub>)"
            independence = line_trace(
                sel["x"], sel["neg_log_p_pred"], "black", name, "independence", "independence", dash="dot"
            )
            pending.append((independence.update(showlegend=first), r, c))
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return arrange(
        fig,
        Panels(rows=len(corpora), cols=len(ks), panel_height=230),
        title=title or f"Emergence, linearised: −log {P_NK} vs N · S<sup>−α</sup>",
        panel_titles=titles,
        x_title="N · S<sup>−α</sup>",
        y_title=f"−log {P_NK}",
        legend="right",
    )
