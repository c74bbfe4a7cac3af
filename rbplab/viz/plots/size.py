"""Plotly figure builders for the paper's figures.

Every builder is a pure function of tidy DataFrames (the ones `rbplab.study.study` produces):
it only reshapes and draws, never computes statistics, so the same builder serves the
static report, paper exports (`rbplab.viz.export.save`) and the interactive widgets (which copy a
freshly built figure's traces into a live FigureWidget). Every figure gets the page geometry of
`rbplab.viz.layout`: 960 px wide, titles that do not collide, legends below the panels that name
each fitted line's panel with its exponent and interval, and sizes on a sequential colour scale.
Text uses plotly's HTML (<sub>, <sup>), never raw TeX.

Column conventions (extra columns are ignored):
  points : family, corpus, model, S, k, rbp, neg_log_rbp [, neg_log_rbp_low, neg_log_rbp_high]
  fits   : family, corpus, k, alpha, r2 [, alpha_low, alpha_high]
  bands  : family, corpus, k, S, fit, fit_low, fit_high (on the -log RBP_k scale)
  ksweep : family, corpus, k, alpha, r2 [, alpha_low, alpha_high]

Emergence figures (paper Figure 7) and lognormal-theory figures (paper Figure 8) follow the
same rules. Traces carry a `meta` tag saying what they are ("models", "fit", "band", "empirical",
"independence", "law", "extrapolation", "marker", "key", ...), which tests and views select by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rbplab.analysis.data_scaling import data_law_curves
from rbplab.analysis.emergence import sequence_law, sequence_law_range
from rbplab.core.errors import InvalidArgumentError
from rbplab.viz.layout import Panels, arrange, categorical, html_label, legend_key, sequential

REGIME_COLOURS = {"k = 1": "rgba(99,110,250,0.08)", "1 < k <= 100": "rgba(0,204,150,0.08)"}
S_TITLE = "non-embedding parameters S"
NEG_LOG_RBP = "−log RBP<sub>k</sub>"
P_NK = "p<sub>N,k</sub>"
FRONTIER_COLOURS = ("#d62728", "#111111", "#ff7f0e", "#e377c2")  # all visible on Viridis and on white
POWER_TICKS = {"exponentformat": "power", "showexponent": "all"}  # 10⁻⁴, not SI's "100µ"
INDEPENDENCE_DASH, LAW_DASH = "dot", "dash"  # Figure 7's two predictions, told apart by pattern
P_FLOOR = 1e-6  # Figure 7's log axis reaches no lower than this (a measured p of one run in 10⁶)
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


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidArgumentError(f"{what} frame lacks columns {missing}; it has {list(frame.columns)}")


def _fmt_k(k: float) -> str:
    return f"{int(k):,}" if float(k).is_integer() else f"{k:g}"


def si(value: float) -> str:
    """A size or count as people write it: 25.5K, 2.7M, 1.2B."""
    for threshold, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def _interval(row: pd.Series | dict, name: str, digits: int = 3) -> str:
    """ "0.036 [0.030, 0.043]": a value with its interval when the row has one."""
    value = row[name]
    lo, hi = row.get(f"{name}_low"), row.get(f"{name}_high")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _fit_label(row: pd.Series, where: str) -> str:
    r2 = f"{row['r2']:.3f}" if pd.notna(row.get("r2")) else "n/a"
    return f"{where}: α = {_interval(row, 'alpha')}, R² = {r2}"


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


def _markers(
    x: Any, y: Any, colour: str, name: str, group: str, meta: str, size: int | None = None
) -> go.Scatter:
    """Measured points in `colour`, in legend group `group`; `meta` says what they are."""
    marker = {"color": colour} | ({"size": size} if size else {})
    return go.Scatter(x=x, y=y, mode="markers", marker=marker, name=name, legendgroup=group, meta=meta)


def _line(
    x: Any, y: Any, colour: str, name: str, group: str, meta: str, dash: str | None = None
) -> go.Scatter:
    """A curve in `colour` (dashed or dotted when `dash`), in legend group `group`."""
    line = {"color": colour} | ({"dash": dash} if dash else {})
    return go.Scatter(x=x, y=y, mode="lines", line=line, name=name, legendgroup=group, meta=meta)


def _band(x: Any, low: Any, high: Any, colour: str, name: str, group: str, meta: str) -> go.Scatter:
    """A faint filled interval between `low` and `high` over `x` (x sorted), kept out of the legend."""
    x, low, high = np.asarray(x), np.asarray(low), np.asarray(high)
    return go.Scatter(
        x=np.r_[x, x[::-1]],
        y=np.r_[high, low[::-1]],
        fill="toself",
        fillcolor=colour,
        opacity=0.15,
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        name=name,
        legendgroup=group,
        meta=meta,
    )


def _axis_refs(index: int) -> tuple[str, str]:
    suffix = "" if index == 1 else str(index)
    return f"x{suffix}", f"y{suffix} domain"


def _vline(index: int, x: float, colour: str = "grey", dash: str = "dot", width: float = 1) -> dict:
    """A vertical line over the full height of panel `index` (1-based, row-major)."""
    xref, yref = _axis_refs(index)
    return {
        "type": "line",
        "xref": xref,
        "yref": yref,
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": colour, "dash": dash, "width": width},
    }


def _vrect(index: int, x0: float, x1: float, colour: str) -> dict:
    """A shaded band over the full height of panel `index`, below the data."""
    xref, yref = _axis_refs(index)
    return {
        "type": "rect",
        "xref": xref,
        "yref": yref,
        "x0": x0,
        "x1": x1,
        "y0": 0,
        "y1": 1,
        "fillcolor": colour,
        "line": {"width": 0},
        "layer": "below",
    }


def _panels(rows: int, cols: int, **kwargs) -> go.Figure:
    # Spacing and titles are set in pixels by `arrange`; make_subplots only creates the axes.
    return make_subplots(rows=rows, cols=cols, horizontal_spacing=0.02, vertical_spacing=0.02, **kwargs)


def rbp_vs_size(
    points: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    bands: pd.DataFrame | None = None,
    *,
    title: str | None = None,
) -> go.Figure:
    """-log RBP_k against non-embedding size S on log-log axes (paper Figures 3-5).

    One panel per (k, corpus), one colour per family: markers for models (with error bars
    when the points carry bootstrap intervals), the fitted power law as a dashed line whose
    legend entry names its panel with α, its interval and R², and its confidence band shaded.

    Examples
    --------
    >>> from rbplab.study.synthetic import synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> fig = rbp_vs_size(study.points(1), study.fits(1), study.bands(1))
    >>> type(fig).__name__, len(fig.data)
    ('Figure', 7)
    """
    _require(points, ["family", "corpus", "model", "S", "k", "neg_log_rbp"], "points")
    ks = sorted(points["k"].unique())
    corpora = list(dict.fromkeys(points["corpus"]))
    families = list(dict.fromkeys(points["family"]))
    several = len(ks) * len(corpora) > 1
    fig = _panels(len(ks), len(corpora), shared_xaxes=True)
    pending: list = []
    has_bands = bands is not None and len(bands) > 0
    intervals = {"neg_log_rbp_low", "neg_log_rbp_high"} <= set(points.columns)
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
                    + ([f"{corpus}, k={_fmt_k(k)}"] if several else [])
                )
                if has_bands:
                    b = bands[(bands["k"] == k) & (bands["corpus"] == corpus) & (bands["family"] == family)]
                    b = b.sort_values("S")
                    if len(b):
                        pending.append(
                            (
                                _band(
                                    b["S"],
                                    b["fit_low"],
                                    b["fit_high"],
                                    colour,
                                    f"{family} band",
                                    f"{family}|{corpus}|{k}",
                                    "band",
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
                                    name=_fit_label(fit_row, where) if fit_row is not None else where,
                                    legendgroup=f"{family}|{corpus}|{k}",
                                    meta="fit",
                                ),
                                r,
                                c,
                            )
                        )
                error_y = _error_bars(sel, "neg_log_rbp", "neg_log_rbp_low", "neg_log_rbp_high")
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
    if has_bands:
        pending.append((legend_key("shaded: 95 % confidence band of the fit", mode="lines"), 1, 1))
        pending[-1][0].update(fill="toself", fillcolor="rgba(85,85,85,0.15)", line={"width": 0})
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return arrange(
        fig,
        Panels(rows=len(ks), cols=len(corpora), panel_height=300, shared_x=True),
        title=title or "Relative-based scaling: −log RBP<sub>k</sub> vs model size",
        panel_titles=[f"{c} · k={_fmt_k(k)}" for k in ks for c in corpora],
        x_title=S_TITLE,
        y_title=NEG_LOG_RBP,
    )


def rbp_curves(curves: pd.DataFrame, *, title: str | None = None, marker_k: float | None = None) -> go.Figure:
    """RBP_k as a function of k (log axis) for each model: the CDF of the rank, one panel per
    corpus, models coloured by size (dark: smallest). `curves` has columns model, S, corpus, k, rbp."""
    _require(curves, ["model", "S", "corpus", "k", "rbp"], "curves")
    corpora = list(dict.fromkeys(curves["corpus"]))
    fig = _panels(1, len(corpora), shared_yaxes=True)
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
                        name=f"{model} (S = {si(S)})",
                        legendgroup=model,
                        showlegend=c == 1,
                        meta="model",
                    ),
                    1,
                    c,
                )
            )
    _flush(fig, pending)
    if marker_k is not None:
        # Shapes as plain dicts set once: add_vline per panel re-validates the figure each time.
        fig.update_layout(shapes=[_vline(c, marker_k) for c in range(1, len(corpora) + 1)])
    fig.update_xaxes(type="log")
    return arrange(
        fig,
        Panels(cols=len(corpora), panel_height=380),
        title=title or "RBP<sub>k</sub> against k",
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
    _require(sweep, ["family", "corpus", "k", "alpha", "r2"], "ksweep")
    fig = _panels(1, 2)
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
            label = f"{name} at k={_fmt_k(row['k'])}: α = {_interval(row, 'alpha')}, R² = {row['r2']:.3f}"
        pending.append(
            (
                go.Scatter(
                    x=sel["k"],
                    y=sel["r2"],
                    mode="lines+markers",
                    marker={"size": 4},
                    line={"color": colour},
                    name=label,
                    legendgroup=name,
                    meta="r2",
                ),
                1,
                1,
            )
        )
        if {"alpha_low", "alpha_high"} <= set(sel.columns) and sel["alpha_low"].notna().any():
            # The interval as a faint band: error bars of several curves over 30+ ks overprint.
            ok = sel[sel["alpha_low"].notna() & sel["alpha_high"].notna()]
            band = _band(
                ok["k"], ok["alpha_low"], ok["alpha_high"], colour, f"{name} interval", name, "alpha interval"
            )
            pending.append((band, 1, 2))
        pending.append(
            (
                go.Scatter(
                    x=sel["k"],
                    y=sel["alpha"],
                    mode="lines+markers",
                    marker={"size": 4},
                    line={"color": colour},
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    customdata=sel[["alpha_low", "alpha_high"]] if "alpha_low" in sel.columns else None,
                    hovertemplate="k=%{x}<br>α=%{y:.4f}"
                    + (" [%{customdata[0]:.4f}, %{customdata[1]:.4f}]" if "alpha_low" in sel.columns else "")
                    + "<extra>%{fullData.name}</extra>",
                    meta="alpha",
                ),
                1,
                2,
            )
        )
        if at is not None:
            for col, y in ((1, "r2"), (2, "alpha")):
                pending.append(
                    (
                        go.Scatter(
                            x=at["k"],
                            y=at[y],
                            mode="markers",
                            marker={"color": colour, "size": 13, "symbol": "diamond", "line": {"width": 1.5}},
                            name=f"{name} at k={_fmt_k(marker_k)}",
                            legendgroup=name,
                            showlegend=False,
                            meta="marker",
                        ),
                        1,
                        col,
                    )
                )
    kmax = vocab_size or float(sweep["k"].max())
    _flush(fig, pending)
    shapes = []
    for col in (1, 2):
        shapes.append(_vrect(col, 0.8, 1.25, REGIME_COLOURS["k = 1"]))
        shapes.append(_vrect(col, 1.25, 100, REGIME_COLOURS["1 < k <= 100"]))
        if vocab_size:
            shapes.append(_vline(col, vocab_size))
        if marker_k is not None:
            shapes.append(_vline(col, marker_k, colour="black", dash="dash"))
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
        subtitle=subtitle,
        panel_titles=["fit quality R²(k)", "exponent α(k)"],
        x_title="k",
    )


# ---- emergence (paper Figure 7) ----------------------------------------------------------------


def _corpus_k_grid(frame: pd.DataFrame) -> tuple[list, list, list[str]]:
    corpora = list(dict.fromkeys(frame["corpus"])) if "corpus" in frame.columns else [None]
    ks = sorted(frame["k"].unique())
    titles = [f"{c} · k={_fmt_k(k)}" if c is not None else f"k={_fmt_k(k)}" for c in corpora for k in ks]
    return corpora, ks, titles


def _cell(frame: pd.DataFrame, corpus: object, k: float) -> pd.DataFrame:
    sel = frame[frame["k"] == k]
    return sel if corpus is None else sel[sel["corpus"] == corpus]


# Where the fitted sigmoid is drawn beyond the measured sizes: `analysis.emergence.sequence_law_range`.
law_range = sequence_law_range


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

    With `extrapolate`, the fitted law also runs beyond the measured sizes (`law_range`: until
    the sigmoid has flattened, at most EXTRAPOLATION_DECADES decades), drawn faded and named
    "extrapolated", with the measured range shaded, so the sigmoid's full shape can be seen."""
    _require(em, ["model", "S", "k", "N", "p_pred", "p_emp"], "emergence")
    corpora, ks, titles = _corpus_k_grid(em)
    ns = sorted(em["N"].unique())
    colours = sequential(ns)
    has_law = {"alpha", "prefactor"} <= set(em.columns)
    fig = _panels(len(corpora), len(ks), shared_xaxes=True)
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
                    lo, hi = law_range(
                        s_min, s_max, float(cell["alpha"].iloc[0]), float(cell["prefactor"].iloc[0]), ns
                    )
                    if lo < s_min or hi > s_max:
                        measured.append((r, c, s_min, s_max))
                        extrapolated = True
            for n in ns:
                sel = cell[cell["N"] == n].sort_values("S")
                colour = colours[float(n)]
                hover = "%{text}<br>S=%{x:.3s}<br>p=%{y:.3g}<extra>empirical</extra>"
                dots = _markers(sel["S"], sel["p_emp"], colour, f"N={n}", f"N{n}", "empirical", size=8)
                dots.update(showlegend=first, text=sel["model"], hovertemplate=hover)
                independence = _line(
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
                    law = _line(
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
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    shapes, labels = [], []
    for r, c, s_min, s_max in measured:
        index = (r - 1) * len(ks) + c
        shapes.append(_vrect(index, s_min, s_max, "rgba(120,120,120,0.12)"))
        xref, yref = _axis_refs(index)
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
    # p spans decades across N and k: a log axis fitted to each panel's measurements (a linear
    # 0-1 axis left k = 1 and N >= 4 flat on 0).
    for r, corpus in enumerate(corpora, start=1):
        for c, k in enumerate(ks, start=1):
            p = _cell(em, corpus, k)["p_emp"].to_numpy(dtype=float)
            p = p[np.isfinite(p) & (p > 0)]
            if len(p):
                lo, hi = max(float(p.min()), P_FLOOR) / 1.6, min(float(p.max()) * 1.6, 1.05)
                fig.update_yaxes(type="log", range=[np.log10(lo), np.log10(hi)], row=r, col=c)
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
    _require(em, ["k", "N", "x", "neg_log_p_emp", "neg_log_p_pred"], "emergence (linearised)")
    corpora, ks, titles = _corpus_k_grid(em)
    colours = sequential(em["N"])
    fig = _panels(len(corpora), len(ks))
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
                dots = _markers(s["x"], s["neg_log_p_emp"], colours[float(n)], f"N={n}", f"N{n}", "empirical")
                pending.append((dots.update(showlegend=show), r, c))
                if len(s):
                    listed.add(n)
            name = "independence: N · (−log RBP<sub>k</sub>)"
            independence = _line(
                sel["x"], sel["neg_log_p_pred"], "black", name, "independence", "independence", dash="dot"
            )
            pending.append((independence.update(showlegend=first), r, c))
    _flush(fig, pending)
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


# ---- lognormal theory (paper Figure 8) ---------------------------------------------------------


def rank_distribution(pmf: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Empirical rank frequencies and the fitted discretised lognormal, log-log (paper Figure 8c),
    one colour per model on the size scale (dark: smallest)."""
    _require(pmf, ["model", "S", "rank", "empirical", "fitted"], "rank pmf")
    fig = go.Figure()
    sizes = pmf.drop_duplicates("model").sort_values("S")
    colours = sequential(sizes["S"])
    traces = []
    for model, S in zip(sizes["model"], sizes["S"], strict=True):
        colour = colours[float(S)]
        sel = pmf[pmf["model"] == model].sort_values("rank")
        emp = sel[sel["empirical"] > 0]
        measured = _markers(
            emp["rank"], emp["empirical"], colour, f"{model} measured", model, "empirical", size=4
        )
        traces.append(measured.update(showlegend=False))
        traces.append(_line(sel["rank"], sel["fitted"], colour, f"{model} (S = {si(S)})", model, "lognormal"))
    fig.add_traces(traces)
    fig.update_xaxes(type="log", title_text="rank R of the ground-truth token")
    fig.update_yaxes(type="log", **POWER_TICKS)
    return arrange(
        fig,
        Panels(panel_height=420),
        title=title or "Rank distribution and lognormal fit",
        subtitle="markers: measured frequency of each rank bin; lines: fitted discretised lognormal",
        y_title="frequency",
    )


PARAMETER_TITLES = {"mu": "μ", "sigma": "σ", "mu_over_sigma": "μ/σ"}


def lognormal_params(params: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """μ, σ and μ/σ of the fitted lognormal against S (paper Figure 8d), one line per corpus, each
    panel titled by its parameter; intervals drawn when the frame has `<name>_low/_high`."""
    _require(params, ["corpus", "S", "mu", "sigma", "mu_over_sigma"], "lognormal params")
    fig = _panels(1, 3)
    pending: list = []
    for i, corpus in enumerate(dict.fromkeys(params["corpus"])):
        sel = params[params["corpus"] == corpus].sort_values("S")
        for col, name in enumerate(PARAMETER_TITLES, start=1):
            pending.append(
                (
                    go.Scatter(
                        x=sel["S"],
                        y=sel[name],
                        mode="lines+markers",
                        line={"color": categorical(i)},
                        error_y=_error_bars(sel, name, f"{name}_low", f"{name}_high"),
                        name=str(corpus),
                        legendgroup=str(corpus),
                        showlegend=col == 1,
                        text=sel.get("model"),
                        meta=name,
                    ),
                    1,
                    col,
                )
            )
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    for col, name in enumerate(PARAMETER_TITLES, start=1):
        fig.update_yaxes(title_text=PARAMETER_TITLES[name], row=1, col=col)
    has_intervals = any(f"{n}_low" in params.columns for n in PARAMETER_TITLES)
    return arrange(
        fig,
        Panels(cols=3, panel_height=340, per_axis_y_titles=True),
        title=title or "Lognormal parameters vs model size",
        subtitle=None if has_intervals else "maximum-likelihood fits per model (no interval available)",
        panel_titles=["location μ", "scale σ", "μ/σ"],
        x_title=S_TITLE,
    )


def ce_vs_rbp(ce: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Cross-entropy and -log RBP_1 against S on log-log axes, empirical (markers, left: Figure 8a)
    next to the lognormal theory's predictions from the fitted (μ, σ) (lines, right: Figure 8b)."""
    _require(ce, ["corpus", "S", "quantity", "value", "source"], "ce")
    fig = _panels(1, 2)
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
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="nats per token", row=1, col=1)
    fig.update_yaxes(title_text="nats (theory)", row=1, col=2)
    return arrange(
        fig,
        Panels(cols=2, panel_height=360, per_axis_y_titles=True),
        title=title or "Cross-entropy vs −log RBP<sub>1</sub>",
        panel_titles=["measured", "lognormal theory (appendix B)"],
        x_title=S_TITLE,
    )


# ---- training dynamics: loss against tokens seen D, the joint law L(S, D) --------------------------
def _size_label(S: float) -> str:
    return f"S = {si(S)}"


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
    selection); fits: `rbplab.analysis.data_scaling.data_fits` rows (S, beta, prefactor, r2 and
    the interval of beta), drawn as dashed power laws over each size's D range. Sizes are on the
    sequential colour scale (dark: smallest). `step` is the checkpoint drawn on the right and
    marked by a dotted line on the left (default: the last step every size reached)."""
    _require(points, ["S", "D", "step", y], "points")
    points = points[points["D"] > 0]
    sizes = sorted(points["S"].unique())
    colours = sequential(sizes)
    if step is None and len(points):
        reached = points.groupby("step")["S"].nunique()
        step = float(reached[reached == reached.max()].index.max())
    y_label = html_label(y_label)
    fig = _panels(1, 2, shared_yaxes=True)
    pending: list = []
    fits = fits if fits is not None and len(fits) else None
    curves = data_law_curves(fits, points) if fits is not None else None
    for S in sizes:
        colour = colours[float(S)]
        sel = points[points["S"] == S].sort_values("D")
        curve = curves[curves["S"] == S] if curves is not None else ()
        fitted = len(curve) > 0
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
                    showlegend=not fitted,  # one legend entry per size: its fit's, when it has one
                    meta="points",
                ),
                1,
                1,
            )
        )
        if fitted:
            row = fits[fits["S"] == S].iloc[0]
            pending.append(
                (
                    go.Scatter(
                        x=curve["D"],
                        y=curve["fitted"],
                        mode="lines",
                        line={"color": colour, "dash": "dash"},
                        name=f"{_size_label(S)}: β = {_interval(row, 'beta')}, R² = {row['r2']:.3f}",
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
                    marker={"color": [colours[float(s)] for s in at["S"]], "size": 10, "line": {"width": 1}},
                    line={"color": "#555", "width": 1},
                    name=f"at step {step:,.0f}",
                    meta="step",
                ),
                1,
                2,
            )
        )
        if len(at):
            fig.update_layout(shapes=[_vline(1, float(at["D"].iloc[0]))])
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="tokens seen D", row=1, col=1)
    fig.update_xaxes(title_text=S_TITLE, row=1, col=2)
    return arrange(
        fig,
        Panels(cols=2, panel_height=380),
        title=title or f"{y_label} over training",
        panel_titles=["vs tokens seen D", "vs size S" + ("" if step is None else f" at step {step:,.0f}")],
        y_title=y_label,
    )


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
            colorbar={"title": {"text": html_label(loss_label)}},
            name=loss_label,
            showlegend=False,
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
                    line={"color": FRONTIER_COLOURS[i % len(FRONTIER_COLOURS)], "width": 3, "dash": "dash"},
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
                marker={"color": "#111111", "size": 7, "line": {"color": "white", "width": 1}},
                name="checkpoints",
                meta="points",
            )
        )
    if traces:
        fig.add_traces(traces)
    outside = [t.name.split(": ", 1)[1] for t in traces if t.meta == "frontier" and not len(t.x)]
    fig.update_xaxes(title_text="log<sub>10</sub> tokens seen D")
    fig.update_yaxes(title_text="log<sub>10</sub> non-embedding parameters S")
    return arrange(
        fig,
        Panels(panel_height=440),
        title=title or f"Fitted {loss_label}: iso-loss contours and the compute-optimal frontier",
        subtitle=f"the frontier of {', '.join(outside)} lies outside the fitted range" if outside else None,
        colorbar=True,
    )


# ---- beyond the paper: the cross-entropy decomposition, the prediction audit, the paper's numbers ---
DECOMPOSITION_TITLES = {"ee": "error entropy EE", "sa": "self-alignment SA", "conf": "confidence Conf"}


def decomposition_vs_size(dec: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """EE, SA and Conf (nats) against S, one panel per term and one line per corpus
    (`Study.decomposition`). SA and Conf depend on the number of tokens, so the legend states
    each corpus's token count: compare those two terms across corpora only at equal counts."""
    _require(dec, ["corpus", "S", "n_tokens", *DECOMPOSITION_TITLES], "decomposition")
    fig = _panels(1, 3)
    pending: list = []
    for i, corpus in enumerate(dict.fromkeys(dec["corpus"])):
        sel = dec[dec["corpus"] == corpus].sort_values("S")
        name = f"{corpus} ({si(sel['n_tokens'].iloc[0])} tokens)"
        for col, term in enumerate(DECOMPOSITION_TITLES, start=1):
            pending.append(
                (
                    go.Scatter(
                        x=sel["S"],
                        y=sel[term],
                        mode="lines+markers",
                        line={"color": categorical(i)},
                        name=name,
                        legendgroup=str(corpus),
                        showlegend=col == 1,
                        text=sel.get("model"),
                        hovertemplate="%{text}<br>S=%{x:.3s}<br>%{y:.4f} nats<extra></extra>",
                        meta=term,
                    ),
                    1,
                    col,
                )
            )
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    for col in range(1, 4):
        fig.update_yaxes(title_text="nats", row=1, col=col)
    return arrange(
        fig,
        Panels(cols=3, panel_height=340, per_axis_y_titles=True),
        title=title or "Cross-entropy decomposition vs model size: CE = EE + SA − Conf",
        subtitle="SA and Conf grow with the number of tokens: compare them at equal token counts",
        panel_titles=list(DECOMPOSITION_TITLES.values()),
        x_title=S_TITLE,
    )


def decomposition_bars(dec: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """CE of each model split into its terms as stacked bars, one panel per corpus: EE and SA
    stacked upwards, −Conf downwards, so the bars' net height is CE (drawn as a marker)."""
    _require(dec, ["corpus", "model", "S", "ce", *DECOMPOSITION_TITLES], "decomposition")
    corpora = list(dict.fromkeys(dec["corpus"]))
    # Two panels a row: four in one left each size label ~30 px, which plotly rotated into the x
    # title (and dropped the last one of).
    cols = min(2, len(corpora))
    rows = -(-len(corpora) // cols)
    fig = _panels(rows, cols, shared_yaxes=True)
    pending: list = []
    parts = (("ee", "EE", 1.0), ("sa", "SA", 1.0), ("conf", "−Conf", -1.0))
    ticks: dict[int, tuple] = {}
    for c, corpus in enumerate(corpora, start=1):
        sel = dec[dec["corpus"] == corpus].sort_values("S")
        labels = np.arange(1, len(sel) + 1)  # numeric positions, named by S on the axis below
        ticks[c] = (labels, [si(s) for s in sel["S"]])
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
    _flush(fig, pending)
    fig.update_layout(barmode="relative")
    for c, (values, text) in ticks.items():
        row, col = 1 + (c - 1) // cols, 1 + (c - 1) % cols
        fig.update_xaxes(tickvals=values, ticktext=text, tickangle=0, row=row, col=col)
    return arrange(
        fig,
        Panels(rows=rows, cols=cols, panel_height=260),
        title=title or "Cross-entropy decomposed per model",
        panel_titles=[str(c) for c in corpora],
        x_title="model (non-embedding parameters S)",
        y_title="nats per token",
    )


def _audit_label(row: pd.Series) -> str:
    metric = str(row["metric"])
    if metric == "rbp":
        return f"−log RBP<sub>{_fmt_k(row['k'])}</sub>"
    return {"ce": "CE", "ee": "EE", "ee_mm": "EE (Miller-Madow)", "mrr": "−log MRR"}.get(metric, metric)


def prediction_audit(audit: pd.DataFrame, *, title: str | None = None, level: float = 0.95) -> go.Figure:
    """Predicted against measured loss of every held-out model (`Study.prediction_audit`), one
    panel per number of held-out sizes: error bars are the prediction intervals, filled markers
    the ones that cover the measurement, open markers the misses, the grey diagonal a perfect
    prediction. Log axes: a point's distance from the diagonal is its relative error."""
    _require(audit, ["n_holdout", "metric", "k", "loss_observed", "loss_predicted", "covered"], "audit")
    holdouts = sorted(audit["n_holdout"].unique())
    fig = _panels(1, len(holdouts))
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
                        error_y=_error_bars(
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
    pending.append((legend_key("open marker: outside its interval", mode="markers"), 1, 1))
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    n_models = "largest size" if holdouts == [1] else "largest sizes"
    return arrange(
        fig,
        Panels(cols=len(holdouts), panel_height=360),
        title=title or "Does the law predict the next model? Predicted vs measured loss",
        subtitle=f"error bars: {level:.0%} prediction intervals of the law fitted on the smaller models",
        panel_titles=[f"{n} {n_models if n > 1 else 'largest size'} held out" for n in holdouts],
        x_title="measured loss",
        y_title="predicted loss",
    )


def reference_vs_size(
    reference: pd.DataFrame, points: pd.DataFrame | None = None, *, title: str | None = None
) -> go.Figure:
    """The paper's own GPT-2 measurements (`rbplab.store.paper_reference`) against S, one panel
    per k, with a user's own GPT-2 points beside them when `points` (from `Study.points`, any
    corpus) holds some; the legend states each source's tie convention."""
    _require(reference, ["model", "S", "k", "neg_log_rbp", "ties"], "reference")
    ks = sorted(reference["k"].unique())
    fig = _panels(1, len(ks))
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
    _flush(fig, pending)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return arrange(
        fig,
        Panels(cols=len(ks), panel_height=320),
        title=title or "The paper's GPT-2 measurements (its code repository)",
        subtitle="1,000 Wikipedia sequences × 512 tokens, fp32, special-token positions dropped",
        panel_titles=[f"k={_fmt_k(k)}" for k in ks],
        x_title=S_TITLE,
        y_title=NEG_LOG_RBP,
    )
