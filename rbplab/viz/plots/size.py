"""Loss against model size S: −log RBP_k against S with its fitted power law and confidence band
(paper Figures 3-5), the law's predictions for held-out larger models, and the paper's own GPT-2
measurements beside a study's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.viz.layout import Panels, arrange, categorical, legend_key
from rbplab.viz.plots.traces import (
    NEG_LOG_RBP,
    S_TITLE,
    add_pending,
    axis_refs,
    band_trace,
    error_bars,
    format_k,
    grid_note,
    line_trace,
    require_columns,
    subplots,
    with_interval,
)


def _fit_label(row: pd.Series, where: str) -> str:
    r2 = f"{row['r2']:.3f}" if pd.notna(row.get("r2")) else "n/a"
    return f"{where}: α = {with_interval(row, 'alpha')}, R² = {r2}"


def rbp_vs_size(
    points: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    bands: pd.DataFrame | None = None,
    *,
    title: str | None = None,
) -> go.Figure:
    """-log RBP_k against non-embedding size S on log-log axes (paper Figures 3-5).

    One panel per (k, corpus), one colour per family: markers for models (with error bars
    when the points carry bootstrap intervals), the fitted power law as a dashed line (named by
    its panel, α, its interval and R² when hovered) and its confidence band shaded. The legend
    has one entry per family and one per line style; each panel states its fits (α with its
    interval, R²) in its upper right corner, in the family's colour.

    Examples
    --------
    >>> from rbplab.study import size, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> fig = rbp_vs_size(study.points(1), size.fits(study, 1), size.bands(study, 1))
    >>> type(fig).__name__, len(fig.data)
    ('Figure', 8)
    """
    require_columns(points, ["family", "corpus", "model", "S", "k", "neg_log_rbp"], "points")
    ks = sorted(points["k"].unique())
    corpora = list(dict.fromkeys(points["corpus"]))
    families = list(dict.fromkeys(points["family"]))
    several = len(ks) * len(corpora) > 1
    fig = subplots(len(ks), len(corpora), shared_xaxes=True)
    pending: list = []
    has_bands = bands is not None and len(bands) > 0
    intervals = {"neg_log_rbp_low", "neg_log_rbp_high"} <= set(points.columns)
    labels: dict[tuple[int, int], list] = {}  # each panel's fits, stated in the panel
    for r, k in enumerate(ks, start=1):
        for c, corpus in enumerate(corpora, start=1):
            first = r == 1 and c == 1
            for f, family in enumerate(families):
                colour = categorical(f)
                sel = points[(points["k"] == k) & (points["corpus"] == corpus) & (points["family"] == family)]
                sel = sel.sort_values("S")
                fit_row = None
                if fits is not None and len(fits):
                    fr = fits[(fits["k"] == k) & (fits["corpus"] == corpus) & (fits["family"] == family)]
                    fit_row = fr.iloc[0] if len(fr) else None
                where = ", ".join(
                    ([family] if len(families) > 1 or not several else [])
                    + ([f"{corpus}, k={format_k(k)}"] if several else [])
                )
                if has_bands:
                    b = bands[(bands["k"] == k) & (bands["corpus"] == corpus) & (bands["family"] == family)]
                    b = b.sort_values("S")
                    if len(b):
                        group = f"{family}|{corpus}|{k}"
                        band = band_trace(
                            b["S"], b["fit_low"], b["fit_high"], colour, f"{family} band", group, "band"
                        )
                        # The name is for hovering: the legend has one entry for every dashed
                        # line, and each panel states its own fits as text.
                        name = _fit_label(fit_row, where) if fit_row is not None else where
                        fit = line_trace(b["S"], b["fit"], colour, name, group, "fit", dash="dash")
                        pending += [(band, r, c), (fit.update(showlegend=False), r, c)]
                        if fit_row is not None:
                            labels.setdefault((r, c), []).append((family, colour, fit_row))
                error_y = error_bars(sel, "neg_log_rbp", "neg_log_rbp_low", "neg_log_rbp_high")
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
                            name=f"{family} models"
                            + (" (95 % document-bootstrap intervals)" if intervals else ""),
                            legendgroup=family,
                            legendrank=1,
                            showlegend=first,
                            meta="models",
                        ),
                        r,
                        c,
                    )
                )
    if labels:
        pending.append(
            (legend_key("dashed: fitted power law (α and R² in each panel)", mode="lines", dash="dash"), 1, 1)
        )
    if has_bands:
        pending.append((legend_key("shaded: 95 % confidence band of the fit", mode="lines"), 1, 1))
        pending[-1][0].update(fill="toself", fillcolor="rgba(85,85,85,0.15)", line={"width": 0})
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    if labels:
        fig.update_layout(
            annotations=[
                _fit_note(r, c, len(corpora), fits, several_families=len(families) > 1)
                for (r, c), fits in labels.items()
            ]
        )
    return arrange(
        fig,
        Panels(rows=len(ks), cols=len(corpora), panel_height=300, shared_x=True),
        title=title or "Relative-based scaling: −log RBP<sub>k</sub> vs model size",
        caption=grid_note(points) or None,
        panel_titles=[f"{c} · k={format_k(k)}" for k in ks for c in corpora],
        x_title=S_TITLE,
        y_title=NEG_LOG_RBP,
    )


def _fit_note(row: int, col: int, cols: int, fits: list, *, several_families: bool) -> dict:
    """The fits of panel (row, col) as text in its upper right corner (the law falls with S, so
    its points lie low there): α with its interval and R², one line per family in its colour."""
    lines = []
    for family, colour, fit in fits:
        r2 = f"{fit['r2']:.3f}" if pd.notna(fit.get("r2")) else "n/a"
        # Two short lines, not one long one: a paper column's panel is ~120 px wide.
        head = f"{family}: " if several_families else ""
        for text in (f"{head}α = {with_interval(fit, 'alpha')}", f"R² = {r2}"):
            lines.append(f'<span style="color:{colour}">{text}</span>')
    xref, yref = axis_refs((row - 1) * cols + col)
    return {
        "text": "<br>".join(lines),
        "name": "fit note",
        "xref": f"{xref} domain",
        "yref": yref,
        "x": 0.98,
        "y": 0.98,
        "xanchor": "right",
        "yanchor": "top",
        "align": "right",
        "showarrow": False,
        "bgcolor": "rgba(255,255,255,0.7)",
    }


def _audit_label(row: pd.Series) -> str:
    metric = str(row["metric"])
    if metric == "rbp":
        return f"−log RBP<sub>{format_k(row['k'])}</sub>"
    return {"ce": "CE", "ee": "EE", "ee_mm": "EE (Miller-Madow)", "mrr": "−log MRR"}.get(metric, metric)


def prediction_audit(audit: pd.DataFrame, *, title: str | None = None, level: float = 0.95) -> go.Figure:
    """Predicted against measured loss of every held-out model
    (`rbplab.study.decomposition.prediction_audit`), one panel per number of held-out sizes: error
    bars are the prediction intervals, filled markers the ones that cover the measurement, open
    markers the misses, the grey diagonal a perfect prediction. Log axes: a point's distance from
    the diagonal is its relative error."""
    require_columns(
        audit, ["n_holdout", "metric", "k", "loss_observed", "loss_predicted", "covered"], "audit"
    )
    holdouts = sorted(audit["n_holdout"].unique())
    fig = subplots(1, len(holdouts))
    pending: list = []
    frame = audit.assign(series=[_audit_label(r) for _, r in audit.iterrows()])
    series = list(dict.fromkeys(frame["series"]))
    lo = float(np.nanmin(frame[["loss_observed", "loss_predicted"]].to_numpy()))
    hi = float(np.nanmax(frame[["loss_observed", "loss_predicted"]].to_numpy()))
    for c, n_out in enumerate(holdouts, start=1):
        pending.append(
            (
                go.Scatter(
                    x=[lo, hi],
                    y=[lo, hi],
                    mode="lines",
                    line={"color": "grey", "dash": "dot"},
                    name="predicted = measured",
                    showlegend=c == 1,
                    hoverinfo="skip",
                    meta="diagonal",
                ),
                1,
                c,
            )
        )
        for i, name in enumerate(series):
            sel = frame[(frame["n_holdout"] == n_out) & (frame["series"] == name)]
            if not len(sel):
                continue
            covered = sel["covered"].fillna(False).to_numpy(dtype=bool)
            pending.append(
                (
                    go.Scatter(
                        x=sel["loss_observed"],
                        y=sel["loss_predicted"],
                        mode="markers",
                        marker={
                            "color": categorical(i),
                            "size": 9,
                            "symbol": np.where(covered, "circle", "circle-open"),
                            "line": {"color": categorical(i), "width": 2},
                        },
                        error_y=error_bars(
                            sel, "loss_predicted", "loss_predicted_low", "loss_predicted_high"
                        ),
                        name=name,
                        legendgroup=name,
                        showlegend=c == 1,
                        text=[
                            f"{r.get('corpus', '')} · {r['held_out']}"
                            f"<br>{r['interval_units']:+.2f} interval half-widths"
                            for _, r in sel.iterrows()
                        ],
                        hovertemplate="%{text}<br>measured %{x:.4f}<br>predicted %{y:.4f}<extra></extra>",
                        meta="held out",
                    ),
                    1,
                    c,
                )
            )
    pending.append((legend_key("filled: measurement inside its interval", mode="markers"), 1, 1))
    pending.append((legend_key("open: outside it", mode="markers", symbol="circle-open"), 1, 1))
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    n_models = "largest size" if holdouts == [1] else "largest sizes"
    return arrange(
        fig,
        Panels(cols=len(holdouts), panel_height=360),
        title=title or "Does the law predict the next model? Predicted vs measured loss",
        caption=grid_note(audit) or None,
        subtitle=f"error bars: {level:.0%} prediction intervals of the law fitted on the smaller models",
        panel_titles=[f"{n} {n_models if n > 1 else 'largest size'} held out" for n in holdouts],
        x_title="measured loss",
        y_title="predicted loss",
    )


def reference_vs_size(
    reference: pd.DataFrame, points: pd.DataFrame | None = None, *, title: str | None = None
) -> go.Figure:
    """The paper's own GPT-2 measurements (`rbplab.catalog.paper_reference`) against S, one panel
    per k, with a user's own GPT-2 points beside them when `points` (from `Study.points`, any
    corpus) holds some; the legend states each source's tie convention."""
    require_columns(reference, ["model", "S", "k", "neg_log_rbp", "ties"], "reference")
    ks = sorted(reference["k"].unique())
    fig = subplots(1, len(ks))
    pending: list = []
    ref_ties = reference["ties"].iloc[0]
    own = None
    if points is not None and len(points):
        own = points[points["k"].isin(ks)]
    for c, k in enumerate(ks, start=1):
        sel = reference[reference["k"] == k].sort_values("S")
        pending.append(
            (
                go.Scatter(
                    x=sel["S"],
                    y=sel["neg_log_rbp"],
                    mode="lines+markers",
                    line={"color": categorical(0), "dash": "dash"},
                    marker={"size": 9, "symbol": "square"},
                    name=f"paper's GPT-2 on Wikipedia ({ref_ties} ties)",
                    legendgroup="paper",
                    showlegend=c == 1,
                    text=sel["model"],
                    hovertemplate="%{text}<br>S=%{x:.3s}<br>-log RBP=%{y:.4f}<extra></extra>",
                    meta="paper",
                ),
                1,
                c,
            )
        )
        if own is None:
            continue
        for i, (corpus, part) in enumerate(own[own["k"] == k].groupby("corpus", sort=True), start=1):
            part = part.sort_values("S")
            pending.append(
                (
                    go.Scatter(
                        x=part["S"],
                        y=part["neg_log_rbp"],
                        mode="markers",
                        marker={"color": categorical(i), "size": 9},
                        name=f"yours · {corpus}"
                        + (f" ({part['ties'].iloc[0]} ties)" if "ties" in part else ""),
                        legendgroup=f"own|{corpus}",
                        showlegend=c == 1,
                        text=part["model"],
                        hovertemplate="%{text}<br>S=%{x:.3s}<br>-log RBP=%{y:.4f}<extra></extra>",
                        meta="own",
                    ),
                    1,
                    c,
                )
            )
    add_pending(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return arrange(
        fig,
        Panels(cols=len(ks), panel_height=320),
        title=title or "The paper's GPT-2 measurements (its code repository)",
        caption=grid_note(own) if own is not None and len(own) else None,
        subtitle="1,000 Wikipedia sequences × 512 tokens, fp32, special-token positions dropped",
        panel_titles=[f"k={format_k(k)}" for k in ks],
        x_title=S_TITLE,
        y_title=NEG_LOG_RBP,
    )
