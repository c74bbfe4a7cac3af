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
    grid_note,
    line_trace,
    marker_trace,
    probability_axis,
    require_columns,
    subplots,
    vrect,
)

P_NK = "p<sub>N,k</sub>"
INDEPENDENCE_DASH, LAW_DASH = "dot", "dash"  # Figure 7's two predictions, told apart by pattern
# and by width: the fitted law is a broad faint stroke under the thin dotted independence line, so
# where the two agree both stay visible (two thin patterns on one path read as one line).
INDEPENDENCE_WIDTH, LAW_WIDTH, LAW_OPACITY = 1.5, 5.0, 0.45
P_FLOOR = 1e-6  # Figure 7's log axis reaches no lower than this (a measured p of one run in 10⁶)
P_MAX = 1.0  # nor higher than this: markers at p = 1 are drawn whole on its edge (cliponaxis off)


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

    def law(xs: np.ndarray, opacity: float, name: str, meta: str, hover: str) -> go.Scatter:
        return go.Scatter(
            x=xs,
            y=np.exp(-sequence_law(c, alpha, n, xs)),
            mode="lines",
            line={"color": colour, "dash": LAW_DASH, "width": LAW_WIDTH},
            opacity=opacity,
            name=name,
            legendgroup=f"N{n}",
            showlegend=False,
            meta=meta,
            hovertemplate=f"S=%{{x:.3s}}<br>p=%{{y:.3g}}<extra>{hover}</extra>",
        )

    inside = np.geomspace(s_min, s_max, 40)
    traces = [law(inside, LAW_OPACITY, f"N={n} fitted law", "law", "fitted law")]
    parts = []
    if lo < s_min:
        parts.append(np.geomspace(lo, s_min, 40))
    if hi > s_max:
        parts.append(np.geomspace(s_max, hi, 80))
    if parts:
        xs = np.concatenate([np.r_[part, np.nan] for part in parts])[:-1]  # a gap over the measured range
        name = f"N={n} fitted law, extrapolated beyond the measured S"
        beyond = law(xs, LAW_OPACITY / 2, name, "extrapolation", "extrapolated")
        traces.append(beyond.update(connectgaps=False))
    return traces


MEASURED_REACH = 6.0  # a panel's p axis reaches at most this factor below its smallest measurement


def _p_ranges(pending: list) -> dict[tuple[int, int], tuple[float, float]]:
    """The y range (low, high) of each panel: from the smallest to the largest positive p any of
    its markers or lines draws, with a margin of a factor 1.6, but no lower than P_FLOOR nor than
    MEASURED_REACH below the smallest measurement (a prediction of p = 10⁻²⁰ for N = 32 would
    leave the measurements in a sliver at the top)."""
    drawn: dict[tuple[int, int], list[np.ndarray]] = {}
    measured: dict[tuple[int, int], list[np.ndarray]] = {}
    for trace, r, c in pending:
        if trace.y is None:
            continue
        y = np.asarray([np.nan if v is None else v for v in trace.y], dtype=float)
        y = y[np.isfinite(y) & (y > 0)]
        drawn.setdefault((r, c), []).append(y)
        if trace.meta == "empirical":
            measured.setdefault((r, c), []).append(y)
    ranges = {}
    for cell, parts in drawn.items():
        p = np.concatenate(parts)
        if not len(p):
            continue
        floor = P_FLOOR
        ours = np.concatenate(measured.get(cell, [np.empty(0)]))
        if len(ours):
            floor = max(floor, float(ours.min()) / MEASURED_REACH)
        lo = max(float(p.min()), floor) / 1.6
        # Everything below the floor (N = 32 at k = 1, nothing measured): a decade above it,
        # empty; a probability's axis ends at 1 at most, and spans a decade at least.
        hi = min(max(float(p.max()) * 1.6, lo * 10), P_MAX)
        ranges[cell] = (min(lo, hi / 10), hi)
    return ranges


def emergence(em: pd.DataFrame, *, title: str | None = None, extrapolate: bool = False) -> go.Figure:
    """Sequence success p_{N,k} against S (the sigmoid view of paper Figure 7): one panel per
    (corpus, k), N on a sequential colour scale; markers are the empirical fraction of N-token
    runs all within the top k, thin dotted lines the independence prediction RBP_k^N, broad faint
    dashed lines the fitted exp(-C N S^-α) (needs columns alpha and prefactor; otherwise p_fit at
    the measured sizes). The S axis spans the measured sizes; each panel's p axis spans all it
    draws, down to P_FLOOR or MEASURED_REACH below the measurements, where the lines end.

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
                dots.update(showlegend=first, text=sel["model"], hovertemplate=hover, cliponaxis=False)
                independence = line_trace(
                    sel["S"],
                    sel["p_pred"],
                    colour,
                    f"N={n} RBP<sub>k</sub><sup>N</sup>",
                    f"N{n}",
                    "independence",
                    dash=INDEPENDENCE_DASH,
                )
                independence.line.width = INDEPENDENCE_WIDTH
                pending += [(dots, r, c), (independence.update(showlegend=False), r, c)]
                if lo is not None and len(sel):
                    pending.extend((t, r, c) for t in _law_traces(sel, n, colour, lo, hi))
                elif "p_fit" in sel.columns and sel["p_fit"].notna().any():
                    law = line_trace(
                        sel["S"], sel["p_fit"], colour, f"N={n} fitted law", f"N{n}", "law", dash=LAW_DASH
                    )
                    law.update(showlegend=False, opacity=LAW_OPACITY, line_width=LAW_WIDTH)
                    pending.append((law, r, c))
    keys = [
        legend_key(f"markers: measured {P_NK}", mode="markers"),
        legend_key(
            "thin dotted: independence RBP<sub>k</sub><sup>N</sup>",
            mode="lines",
            dash=INDEPENDENCE_DASH,
            width=INDEPENDENCE_WIDTH,
        ),
        legend_key(
            "broad dashed: fitted law exp(−C N S<sup>−α</sup>)",
            mode="lines",
            dash=LAW_DASH,
            width=LAW_WIDTH,
            opacity=LAW_OPACITY,
        ),
    ]
    if extrapolated:
        keys.append(
            legend_key(
                "faded: law extrapolated beyond the measured S",
                mode="lines",
                dash=LAW_DASH,
                width=LAW_WIDTH,
                opacity=LAW_OPACITY / 2,
            )
        )
    ranges = _p_ranges(pending)
    for trace, r, c in pending:
        if trace.mode == "lines" and (r, c) in ranges and trace.y is not None:
            # A prediction below the panel's range ends at its floor instead of leaving the panel.
            y = np.asarray([np.nan if v is None else v for v in trace.y], dtype=float)
            trace.y = np.where(y >= ranges[r, c][0], y, np.nan)
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
    # p spans decades across N and k: a log axis fitted to all that each panel draws (a linear
    # 0-1 axis left k = 1 and N >= 4 flat on 0).
    for (r, c), (lo, hi) in ranges.items():
        fig.update_yaxes(
            type="log", range=[np.log10(lo), np.log10(hi)], **probability_axis(True), row=r, col=c
        )
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
        caption=grid_note(em) or None,
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
        caption=grid_note(em) or None,
        panel_titles=titles,
        x_title="N · S<sup>−α</sup>",
        y_title=f"−log {P_NK}",
        legend="right",
    )
