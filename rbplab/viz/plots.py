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

Emergence figures (paper Figure 7) and lognormal-theory figures (paper Figure 8) follow the
same rules.
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


# ---- emergence (paper Figure 7) ----------------------------------------------------------------


def _corpus_k_grid(frame: pd.DataFrame) -> tuple[list, list, list[str]]:
    corpora = list(dict.fromkeys(frame["corpus"])) if "corpus" in frame.columns else [None]
    ks = sorted(frame["k"].unique())
    titles = [f"{c} · k={_fmt_k(k)}" if c is not None else f"k={_fmt_k(k)}" for c in corpora for k in ks]
    return corpora, ks, titles


def _cell(frame: pd.DataFrame, corpus: object, k: float) -> pd.DataFrame:
    sel = frame[frame["k"] == k]
    return sel if corpus is None else sel[sel["corpus"] == corpus]


EXTRAPOLATION_DECADES = 12.0  # how far beyond the measured sizes the fitted law is drawn, at most
P_LOW, P_HIGH = 0.01, 0.95  # the extrapolation runs until the fitted p_{N,k} reaches these


def law_range(
    s_min: float,
    s_max: float,
    alpha: float,
    prefactor: float,
    ns: Sequence[float],
    *,
    decades: float = EXTRAPOLATION_DECADES,
    p_low: float = P_LOW,
    p_high: float = P_HIGH,
) -> tuple[float, float]:
    """The sizes over which to draw p = exp(-C N S^-α) so its sigmoid shows: down to where the
    largest N falls to p_low and up to where the smallest N reaches p_high, but never inside
    the measured range [s_min, s_max] and at most `decades` beyond it. Returns (s_min, s_max)
    unchanged when the law does not rise with S (α <= 0, C <= 0 or not finite)."""
    if not (np.isfinite(alpha) and np.isfinite(prefactor) and alpha > 0 and prefactor > 0 and len(ns)):
        return s_min, s_max
    low = (prefactor * max(ns) / -np.log(p_low)) ** (1 / alpha)
    high = (prefactor * min(ns) / -np.log(p_high)) ** (1 / alpha)
    span = 10.0**decades
    return float(np.clip(low, s_min / span, s_min)), float(np.clip(high, s_max, s_max * span))


def _law_traces(sel: pd.DataFrame, n: int, colour: str, first: bool, lo: float, hi: float) -> list:
    """The fitted law exp(-C N S^-α) on a dense grid: dashed over the measured sizes, and
    dashed but faded where it is extrapolated below or above them."""
    row = sel.iloc[0]
    alpha, c = float(row["alpha"]), float(row["prefactor"])
    s_min, s_max = float(sel["S"].min()), float(sel["S"].max())

    def law(s: np.ndarray) -> np.ndarray:
        return np.exp(-c * n * s**-alpha)

    inside = np.geomspace(s_min, s_max, 40)
    traces = [
        go.Scatter(
            x=inside,
            y=law(inside),
            mode="lines",
            line={"color": colour, "dash": "dash"},
            name=f"N={n} exp(-C N S^-α)",
            legendgroup=f"N{n}",
            showlegend=first,
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
                line={"color": colour, "dash": "dash", "width": 1.5},
                opacity=0.55,
                connectgaps=False,
                name=f"N={n} fitted law, extrapolated beyond the measured S",
                legendgroup=f"N{n}",
                showlegend=first,
                meta="extrapolation",
                hovertemplate="S=%{x:.3s}<br>p=%{y:.3g}<extra>extrapolated</extra>",
            )
        )
    return traces


def emergence(em: pd.DataFrame, *, title: str | None = None, extrapolate: bool = True) -> go.Figure:
    """Sequence success p_{N,k} against S (the sigmoid view of paper Figure 7): one subplot per
    (corpus, k), one colour per N; markers are the empirical fraction of N-token runs all within
    the top k, solid lines the independence prediction RBP_k^N, dashed lines the fitted
    exp(-C N S^-α) (needs columns alpha and prefactor; otherwise p_fit at the measured sizes).

    With `extrapolate`, the fitted law also runs beyond the measured sizes (`law_range`: until
    the sigmoid has flattened, at most EXTRAPOLATION_DECADES decades), drawn faded and named
    "extrapolated", with the measured range shaded, so the sigmoid's full shape can be seen."""
    _require(em, ["model", "S", "k", "N", "p_pred", "p_emp"], "emergence")
    corpora, ks, titles = _corpus_k_grid(em)
    ns = sorted(em["N"].unique())
    has_law = {"alpha", "prefactor"} <= set(em.columns)
    fig = make_subplots(rows=len(corpora), cols=len(ks), subplot_titles=titles, shared_yaxes=True)
    pending: list = []
    measured: list[tuple[int, int, float, float]] = []
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            cell = _cell(em, corpus, k)
            first = r == 1 and c == 1
            lo = hi = None
            if has_law and len(cell) and cell[["alpha", "prefactor"]].notna().all(axis=None):
                s_min, s_max = float(cell["S"].min()), float(cell["S"].max())
                lo, hi = (s_min, s_max)
                if extrapolate:
                    lo, hi = law_range(
                        s_min, s_max, float(cell["alpha"].iloc[0]), float(cell["prefactor"].iloc[0]), ns
                    )
                    if lo < s_min or hi > s_max:
                        measured.append((r, c, s_min, s_max))
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
                if lo is not None and len(sel):
                    pending.extend((t, r, c) for t in _law_traces(sel, n, colour, first, lo, hi))
                elif "p_fit" in sel.columns and sel["p_fit"].notna().any():
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
    for r, c, s_min, s_max in measured:
        fig.add_vrect(
            x0=s_min,
            x1=s_max,
            row=r,
            col=c,
            fillcolor="rgba(120,120,120,0.12)",
            line_width=0,
            layer="below",
            annotation_text="measured",
            annotation_position="top left",
        )
    fig.update_xaxes(title_text="non-embedding parameters S", row=len(corpora))
    fig.update_yaxes(title_text="p_{N,k}", col=1)
    fig.update_yaxes(range=[0, 1.02])
    default = "Emergence: sequence success p_{N,k} vs size (markers empirical, lines predicted)"
    fig.update_layout(
        title=(title or default)
        + (
            "<br><sup>faded dashed: fitted law extrapolated beyond the measured sizes (shaded)</sup>"
            if measured
            else ""
        ),
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


# ---- lognormal theory (paper Figure 8) ---------------------------------------------------------


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


# ---- training dynamics: loss against tokens seen D, the joint law L(S, D) --------------------------
def _size_label(S: float) -> str:
    return f"S={S:.3g}"


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

    points: S, D, step and the loss column `y` (one corpus and k: a `Study.training_table`
    selection); fits: `rbplab.analysis.data_scaling.data_fits` rows (S, beta, prefactor, r2),
    drawn as dashed power laws over each size's D range. `step` marks a checkpoint: a dotted
    vertical line on the left and that checkpoint's points against S on the right."""
    _require(points, ["S", "D", "step", y], "points")
    points = points[points["D"] > 0]
    sizes = sorted(points["S"].unique())
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["vs tokens seen D", "vs size S" + ("" if step is None else f" at step {step:g}")],
        horizontal_spacing=0.1,
    )
    pending: list = []
    for i, S in enumerate(sizes):
        colour = _colour(i)
        sel = points[points["S"] == S].sort_values("D")
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
                    meta="points",
                ),
                1,
                1,
            )
        )
        fr = fits[fits["S"] == S] if fits is not None and len(fits) else pd.DataFrame()
        if len(fr) and np.isfinite(fr["beta"].iloc[0]):
            row = fr.iloc[0]
            grid = np.geomspace(sel["D"].min(), sel["D"].max(), 30)
            pending.append(
                (
                    go.Scatter(
                        x=grid,
                        y=row["prefactor"] * grid ** -row["beta"],
                        mode="lines",
                        line={"color": colour, "dash": "dash"},
                        name=f"{_size_label(S)} β={row['beta']:.3f} R²={row['r2']:.3f}",
                        legendgroup=str(S),
                        meta="fit",
                    ),
                    1,
                    1,
                )
            )
    if step is not None:
        at = points[points["step"] == step].sort_values("S")
        pending.append(
            (
                go.Scatter(
                    x=at["S"],
                    y=at[y],
                    mode="markers+lines",
                    marker={"color": "black", "size": 9},
                    line={"color": "black", "width": 1},
                    name=f"step {step:g}",
                    meta="step",
                ),
                1,
                2,
            )
        )
        if len(at):
            fig.add_vline(x=float(at["D"].iloc[0]), line_dash="dot", line_color="grey", row=1, col=1)
    _flush(fig, pending)
    _log_axes(fig, 1, 2)
    fig.update_xaxes(title_text="tokens seen D", row=1, col=1)
    fig.update_xaxes(title_text="non-embedding parameters S", row=1, col=2)
    fig.update_yaxes(title_text=y_label, col=1)
    fig.update_layout(title=title or f"{y_label} over training", height=460, template=TEMPLATE)
    return fig


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
    _require(surface, ["S", "D", "loss"], "surface")
    grid = surface.pivot_table(index="S", columns="D", values="loss", sort=True)
    fig = go.Figure(
        go.Contour(
            x=np.log10(grid.columns.to_numpy(np.float64)),
            y=np.log10(grid.index.to_numpy(np.float64)),
            z=grid.to_numpy(np.float64),
            colorscale="Viridis",
            contours={"coloring": "heatmap", "showlabels": True},
            colorbar={"title": loss_label},
            name=loss_label,
            meta="surface",
            hovertemplate="log10 D=%{x:.2f}<br>log10 S=%{y:.2f}<br>loss=%{z:.4f}<extra></extra>",
        )
    )
    traces = []
    if frontiers is not None and len(frontiers):
        _require(frontiers, ["quantity", "S_opt", "D_opt"], "frontiers")
        s_lo, s_hi = surface["S"].min(), surface["S"].max()
        d_lo, d_hi = surface["D"].min(), surface["D"].max()
        for i, (quantity, part) in enumerate(frontiers.groupby("quantity", sort=False)):
            inside = part[part["S_opt"].between(s_lo, s_hi) & part["D_opt"].between(d_lo, d_hi)]
            traces.append(
                go.Scatter(
                    x=np.log10(inside["D_opt"].to_numpy(np.float64)),
                    y=np.log10(inside["S_opt"].to_numpy(np.float64)),
                    mode="lines",
                    line={"color": ["white", "red", "orange", "black"][i % 4], "width": 3, "dash": "dash"},
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
                marker={"color": "white", "size": 6, "line": {"color": "black", "width": 1}},
                name="checkpoints",
                meta="points",
            )
        )
    if traces:
        fig.add_traces(traces)
    fig.update_layout(
        title=title or f"Fitted {loss_label}: iso-loss contours and the compute-optimal frontier",
        xaxis_title="log10 tokens seen D",
        yaxis_title="log10 non-embedding parameters S",
        height=520,
        template=TEMPLATE,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
