"""Interactive views: ipywidgets controls driving a plotly FigureWidget.

Each view holds one or more `Study` objects (per family) whose RBP curves are
precomputed, so a callback only looks values up, refits a handful of points and
copies the new traces into the live figure: no ranks are recomputed and dragging a
slider stays smooth. Callbacks are plain methods (`set_k`, `set_n`, `set_corpus`,
`set_family`) so tests and scripts can drive a view without a browser.

Every view draws its figure with one function, `state(**values)` (one value per control):
a slider move calls it for the new value. Executed headless (papermill, nbconvert) nobody
renders widgets, and an executed notebook stores no widget state, so a view then holds a plain
plotly Figure (same callbacks, no front end) and displays its offline explorer
(`rbplab.viz.states`): the same `state` over every value of its controls, switched by plotly
sliders and dropdowns that work in the report page without a kernel. `show()` displays figures
that never change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from IPython.display import display

from rbplab.analysis import data_scaling
from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, RunFailedError
from rbplab.core.summary import EntrySummary
from rbplab.study import Study
from rbplab.viz import plots
from rbplab.viz.layout import untemplated
from rbplab.viz.states import MAX_STATES, Control, explorer

STATIC_ENV = "RBPLAB_STATIC_FIGURES"  # "1": always add static figures, "0": never, unset: detect
_HEADLESS_PARENTS = ("papermill", "nbclient", "nbconvert")
ALL_CORPORA = "(all corpora)"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
ALL_FAMILIES = "(all families)"


def live_frontend() -> bool:
    """True when a front end that renders widgets is attached to this kernel.

    A kernel cannot ask its client what it renders, so this looks at who started it:
    papermill/nbconvert/nbclient mean headless; no IPython kernel at all
    (plain `python notebook.py`) means headless too. $RBPLAB_STATIC_FIGURES overrides.
    """
    forced = os.environ.get(STATIC_ENV, "").strip().lower()
    if forced in ("1", "true", "yes"):
        return False
    if forced in ("0", "false", "no"):
        return True
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return False
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return False
    try:
        import psutil

        for parent in psutil.Process().parents():
            cmdline = " ".join(parent.cmdline()).lower()
            if any(name in cmdline for name in _HEADLESS_PARENTS):
                return False
    except Exception:  # noqa: BLE001 - process inspection is best effort (permissions, platforms)
        pass
    return True


def show(fig: go.Figure | dict) -> None:
    """Display a plotly figure (or a figure's JSON, as `rbplab.viz.states.explorer` makes it) as
    the plotly mime bundle, which JupyterLab renders natively and the report's HTML export turns
    into an embedded plot."""
    if not isinstance(fig, dict):
        fig = go.Figure(fig).to_plotly_json()  # a FigureWidget's current state as a plain figure
    display({PLOTLY_MIME: fig}, raw=True)


def sync_figure(target: go.FigureWidget, source: go.Figure, keep_template: bool = False) -> None:
    """Make `target` show `source` in place: with the same trace layout, traces are updated
    one by one (the front end gets a small diff); otherwise traces are replaced. With
    `keep_template` (a `source` built under `layout.untemplated`) the target keeps its template:
    copying one costs plotly ~12 ms, and the redraw would otherwise lose it."""
    with target.batch_update():
        same = len(target.data) == len(source.data) and all(
            a.type == b.type for a, b in zip(target.data, source.data, strict=True)
        )
        if same:
            for old, new in zip(target.data, source.data, strict=True):
                old.update(new.to_plotly_json(), overwrite=True)
        else:
            target.data = ()
            target.add_traces(list(source.data))
        if not keep_template:
            target.layout = source.layout
            return
        new_layout = source.layout.to_plotly_json()
        new_layout.pop("template", None)
        if set(target.layout.to_plotly_json()) - set(new_layout) - {"template"}:
            # fewer panels than shown: a new layout (the template copied once, for this redraw)
            target.layout = go.Layout(new_layout, template=target.layout.template)
        else:
            target.layout.update(new_layout, overwrite=True)


def _k_options(vocab_size: int, n: int = 160) -> list[tuple[str, int]]:
    # Integer k on a log scale from 1 to |V|: a selection slider shows exact integer values.
    ks = np.unique(np.round(np.logspace(0, np.log10(vocab_size), n)).astype(int))
    ks = np.unique(np.r_[ks, [1, 10, 100, 1000, vocab_size]])
    ks = ks[(ks >= 1) & (ks <= vocab_size)]
    return [(f"{k:,}", int(k)) for k in ks]


def emergence_k_options(study: Study) -> list[tuple[str, int]]:
    """The k at which every run of `study` gives sequence success: any k (`_k_options`) when the
    runs hold their tokens; for runs read from the cache, the k grid their summaries keep, since
    a summary holds hit runs at those k only (not at |V| either, where p_{N,k} = 1 anyway)."""
    grids = [
        {int(k) for k in run.stats.ks}
        for run in study.runs
        if isinstance(run.stats, EntrySummary) and run.stats.stats is None
    ]
    if not grids:
        return _k_options(study.vocab_size)
    ks = sorted(k for k in set.intersection(*grids) if 1 <= k <= study.vocab_size)
    return [(f"{k:,}", k) for k in ks]


def _nearest(options: list[tuple[str, int]], k: int) -> int:
    values = np.array([v for _, v in options])
    return int(values[np.argmin(np.abs(np.log(values) - np.log(max(k, 1))))])


def _slider_control(name: str, options: list[tuple[str, int]]) -> Control:
    return Control(name, tuple(v for _, v in options), tuple(label for label, _ in options))


def _dropdown_control(name: str, options: list) -> Control:
    pairs = [o if isinstance(o, tuple) else (str(o), o) for o in options]
    return Control(name, tuple(v for _, v in pairs), tuple(label for label, _ in pairs), slider=False)


class _FigureView:
    """Controls above a FigureWidget; subclasses build the figure for the current state."""

    def __init__(self, live: bool | None = None) -> None:
        # Headless, nobody renders a FigureWidget (and importing it costs seconds): a plain
        # Figure takes the same in-place updates and is shown statically.
        self.live = live_frontend() if live is None else bool(live)
        self.figure = go.FigureWidget() if self.live else go.Figure()
        self._held = 0
        self.updates = 0  # how many times the figure was rebuilt (tests and the browser check it)

    def _controls(self) -> list[w.Widget]:
        raise NotImplementedError

    def values(self) -> dict[str, Any]:
        """The current value of each control, by the keyword `state` takes it as."""
        raise NotImplementedError

    def state(self, **values: Any) -> go.Figure:
        """The figure for these control values (a plain plotly Figure): what the live view shows
        after a control moves, and each state of the offline explorer."""
        raise NotImplementedError

    def controls(self) -> list[Control]:
        """The controls of the offline explorer: every value each live control reaches."""
        raise NotImplementedError

    def fixed(self) -> dict[str, str]:
        """Settings the offline explorer keeps as the view has them (named in its note)."""
        return {}

    def build(self) -> go.Figure:
        """The figure for the current control values (a plain plotly Figure)."""
        return self.state(**self.values())

    def explorer(self, max_states: int = MAX_STATES) -> dict:
        """The offline explorer: `state` over every value of the controls, as one plotly figure
        (JSON) whose sliders and dropdowns switch between the states without a kernel."""
        return explorer(self.controls(), self.state, self.values(), max_states=max_states, fixed=self.fixed())

    def refresh(self, *_: object) -> None:
        if self._held:
            return
        if self.updates:  # the shown figure has its template: redraws build without one
            with untemplated():
                figure = self.build()
            sync_figure(self.figure, figure, keep_template=True)
        else:
            sync_figure(self.figure, self.build())
        self.updates += 1

    @contextmanager
    def hold_refresh(self) -> Iterator[None]:
        """Change several controls with one redraw at the end (the caller refreshes)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

    @property
    def widget(self) -> w.VBox:
        """Controls above the live figure (views made with live=True)."""
        if not self.live:
            raise RunFailedError(
                "this view was made headless (live=False): use .figure, or make it with live=True"
            )
        if not hasattr(self, "_box"):
            # Controls wrap onto a second row rather than shrink: a squeezed slider has no track
            # left to drag (five controls do not fit one row beside a 960 px figure).
            controls = w.HBox(self._controls(), layout=w.Layout(flex_flow="row wrap", align_items="center"))
            self._box = w.VBox([controls, self.figure])
        return self._box

    def _ipython_display_(self) -> None:
        if self.live:
            display(self.widget)
        if not self.live or not live_frontend():
            show(self.explorer())


class _View(_FigureView):
    """A view of a `Study`, with a family dropdown when it holds several families."""

    def __init__(self, study: Study, family: str | None = None, live: bool | None = None) -> None:
        if not isinstance(study, Study):
            raise InvalidTypeError(f"a view needs a rbplab.study.study.Study, got {type(study).__name__}")
        self.full_study = study
        options = ([ALL_FAMILIES] if len(study.families) > 1 else []) + study.families
        value = family or options[0]
        if value not in options:
            raise InvalidArgumentError(f"unknown family {family!r}; this study has {study.families}")
        self.family_dropdown = w.Dropdown(options=options, value=value, description="family")
        super().__init__(live)

    @property
    def study(self) -> Study:
        """The runs of the selected family (a view of the full study; curves are shared)."""
        return self.family_study(self.family_dropdown.value)

    def family_study(self, family: str | None) -> Study:
        """The runs of `family` (ALL_FAMILIES or None: the whole study)."""
        if family in (None, ALL_FAMILIES) or self.full_study.families == [family]:
            return self.full_study
        return self.full_study.subset(families=family)

    def _family_values(self) -> dict[str, Any]:
        return {"family": self.family_dropdown.value} if len(self.family_dropdown.options) > 1 else {}

    def _family_controls(self) -> list[Control]:
        options = list(self.family_dropdown.options)
        return [_dropdown_control("family", options)] if len(options) > 1 else []

    def set_family(self, family: str) -> None:
        if family not in self.family_dropdown.options:
            raise InvalidArgumentError(
                f"unknown family {family!r}; choose from {list(self.family_dropdown.options)}"
            )
        self.family_dropdown.value = family


class _CorpusMixin:
    def _corpus_dropdown(self, corpus: str | None, allow_all: bool) -> w.Dropdown:
        options = ([ALL_CORPORA] if allow_all else []) + list(self.study.corpora)
        # Default: one corpus, the lightest figure to redraw while dragging.
        value = corpus if corpus is not None else self.study.corpora[0]
        if value not in options:
            raise InvalidArgumentError(
                f"unknown corpus {corpus!r}; this study has {list(self.study.corpora)}"
            )
        return w.Dropdown(options=options, value=value, description="corpus")

    @staticmethod
    def _corpora_of(study: Study, corpus: str) -> list[str]:
        # A family without the chosen corpus shows its first one, as the live view switches to.
        if corpus == ALL_CORPORA:
            return list(study.corpora)
        return [corpus if corpus in study.corpora else study.corpora[0]]

    def _corpus_control(self) -> Control:
        return _dropdown_control("corpus", list(self.corpus_dropdown.options))

    def set_corpus(self, corpus: str) -> None:
        if corpus not in self.corpus_dropdown.options:
            raise InvalidArgumentError(
                f"unknown corpus {corpus!r}; choose from {list(self.corpus_dropdown.options)}"
            )
        self.corpus_dropdown.value = corpus

    def _on_family(self, change: dict) -> None:
        # Another family may have other corpora and another |V|: keep selections that still exist.
        with self.hold_refresh():
            old = self.corpus_dropdown.value
            options = ([ALL_CORPORA] if ALL_CORPORA in self.corpus_dropdown.options else []) + list(
                self.study.corpora
            )
            self.corpus_dropdown.options = options
            self.corpus_dropdown.value = old if old in options else self.study.corpora[0]
            if hasattr(self, "k_slider"):
                k = self.k
                self.k_slider.options = self._slider_options()
                self.k_slider.value = _nearest(list(self.k_slider.options), min(k, self.study.vocab_size))
        self.refresh()


class _KMixin:
    def _slider_options(self) -> list[tuple[str, int]]:
        return _k_options(self.study.vocab_size)

    def _k_slider(self, k: int, description: str = "k") -> w.SelectionSlider:
        options = self._slider_options()
        return w.SelectionSlider(
            options=options,
            value=_nearest(options, k),
            description=description,
            continuous_update=True,
            layout=w.Layout(width="480px", min_width="320px", flex="0 0 auto"),
        )

    @property
    def k(self) -> int:
        return int(self.k_slider.value)

    def set_k(self, k: int) -> None:
        """Move the k slider to the available value closest to k on the log scale."""
        if k < 1 or k > self.study.vocab_size:
            raise InvalidArgumentError(f"k must lie in [1, |V|={self.study.vocab_size}], got {k}")
        self.k_slider.value = _nearest(list(self.k_slider.options), int(k))


class ScalingView(_CorpusMixin, _KMixin, _View):
    """-log RBP_k against S for one k chosen on a log slider (1..|V|), with the power-law fit,
    its confidence band, and α and R² in the legend. Paper Figures 3-5 at any k."""

    def __init__(
        self,
        study: Study,
        k: int = 1,
        corpus: str | None = None,
        family: str | None = None,
        live: bool | None = None,
    ) -> None:
        super().__init__(study, family, live)
        self.k_slider = self._k_slider(k)
        self.corpus_dropdown = self._corpus_dropdown(corpus, allow_all=True)
        self.k_slider.observe(self.refresh, names="value")
        self.corpus_dropdown.observe(self.refresh, names="value")
        self.family_dropdown.observe(self._on_family, names="value")
        self.refresh()

    def _controls(self) -> list[w.Widget]:
        return [self.family_dropdown, self.corpus_dropdown, self.k_slider]

    def values(self) -> dict[str, Any]:
        return {**self._family_values(), "corpus": self.corpus_dropdown.value, "k": self.k}

    def controls(self) -> list[Control]:
        k = _slider_control("k", self._slider_options())
        return [*self._family_controls(), self._corpus_control(), k]

    def state(self, k: int, corpus: str, family: str | None = None) -> go.Figure:
        study = self.family_study(family)
        k = _nearest(_k_options(study.vocab_size), min(k, study.vocab_size))
        points = study.points([k], corpora=self._corpora_of(study, corpus))
        fits = study.fits([k], points=points)
        bands = study.bands([k], points=points)
        return plots.rbp_vs_size(
            points,
            fits,
            bands,
            title=f"{study.family}: -log RBP_k vs S at k={k:,} (|V|={study.vocab_size:,})",
        )


VISIBLE_P = 0.05  # EmergenceView opens on the smallest k where the largest model's p_{N,k} exceeds this


def visible_k(study: Study, n: int, corpus: str | None = None, threshold: float = VISIBLE_P) -> int:
    """The smallest k of the view's k grid (`emergence_k_options`) at which the largest model of `corpus`
    (default: the study's first) succeeds on N-token runs with predicted probability
    RBP_k^N > threshold, so the emergence figure opens on a p_{N,k} that is not ~0. |V| when
    no smaller k qualifies (RBP_|V| = 1)."""
    corpus = corpus if corpus is not None else study.corpora[0]
    ks = [k for _, k in emergence_k_options(study)]
    points = study.points(ks, corpora=[corpus])
    largest = points[points["S"] == points["S"].max()]
    p = largest.groupby("k")["rbp"].max() ** n
    above = p[p > threshold]
    return int(above.index.min()) if len(above) else int(study.vocab_size)


EMERGENCE_STATES = 120  # the emergence explorer's budget (k is thinned to fit; its note says so)
N_GRID = 10  # N values the offline explorer holds between 1 and the N slider's maximum


def n_grid(n_max: int, n: int, size: int = N_GRID) -> list[int]:
    """The N the offline explorer of `EmergenceView` holds: `size` log-spaced integers from 1
    to `n_max` and the view's own N (the live slider reaches every integer)."""
    grid = np.unique(np.round(np.geomspace(1, n_max, size)).astype(int))
    return sorted({int(v) for v in grid} | {int(n)})


class EmergenceView(_CorpusMixin, _KMixin, _View):
    """Sequence success p_{N,k} against S with sliders for N (1..n_max) and k: the empirical
    fraction of N-token runs inside the top k versus the independence prediction RBP_k^N, and
    the fitted law exp(-C N S^-α) over the measured sizes; the "extrapolate" box (or
    `extrapolate=True`) draws it beyond them (faded, "extrapolated") so its sigmoid shows.
    Without `k` the view opens on `visible_k`: the smallest k where the largest model's p_{N,k}
    is above 5 %."""

    def __init__(
        self,
        study: Study,
        k: int | None = None,
        n: int = 10,
        corpus: str | None = None,
        family: str | None = None,
        n_max: int = 300,
        extrapolate: bool = False,
        live: bool | None = None,
    ) -> None:
        super().__init__(study, family, live)
        if not 1 <= n <= n_max:
            raise InvalidArgumentError(f"N must lie in [1, n_max={n_max}], got {n}")
        self.corpus_dropdown = self._corpus_dropdown(corpus, allow_all=False)
        if k is None:
            k = visible_k(self.study, n, self.corpus_dropdown.value)
        self.k_slider = self._k_slider(k)
        self.n_slider = w.IntSlider(
            value=n,
            min=1,
            max=n_max,
            description="N",
            continuous_update=True,
            layout=w.Layout(width="400px", min_width="280px", flex="0 0 auto"),
        )
        self.extrapolate_box = w.Checkbox(
            value=bool(extrapolate),
            description="extrapolate beyond measured S",
            indent=False,  # its own width: the label is not cut to a description column
            layout=w.Layout(width="auto"),
        )
        for control in (self.k_slider, self.n_slider, self.corpus_dropdown, self.extrapolate_box):
            control.observe(self.refresh, names="value")
        self.family_dropdown.observe(self._on_family, names="value")
        self.refresh()

    def _slider_options(self) -> list[tuple[str, int]]:
        return emergence_k_options(self.study)

    @property
    def n(self) -> int:
        return int(self.n_slider.value)

    def set_n(self, n: int) -> None:
        if not self.n_slider.min <= n <= self.n_slider.max:
            raise InvalidArgumentError(f"N must lie in [{self.n_slider.min}, {self.n_slider.max}], got {n}")
        self.n_slider.value = int(n)

    def set_extrapolate(self, extrapolate: bool) -> None:
        self.extrapolate_box.value = bool(extrapolate)

    def _controls(self) -> list[w.Widget]:
        return [
            self.family_dropdown,
            self.corpus_dropdown,
            self.k_slider,
            self.n_slider,
            self.extrapolate_box,
        ]

    def values(self) -> dict[str, Any]:
        return {**self._family_values(), "corpus": self.corpus_dropdown.value, "k": self.k, "n": self.n}

    def controls(self) -> list[Control]:
        return [
            *self._family_controls(),
            self._corpus_control(),
            Control("n", (ns := tuple(n_grid(int(self.n_slider.max), self.n))), tuple(map(str, ns)),
                    reach=int(self.n_slider.max)),
            _slider_control("k", self._slider_options()),
        ]  # fmt: skip

    def fixed(self) -> dict[str, str]:
        return {"extrapolate": "on" if self.extrapolate_box.value else "off"}

    def explorer(self, max_states: int = EMERGENCE_STATES) -> dict:
        # A state here refits the emergence law (~0.2 s): fewer of them keep notebook 03 quick.
        return super().explorer(max_states)

    def state(self, k: int, n: int, corpus: str, family: str | None = None) -> go.Figure:
        study = self.family_study(family)
        corpus = self._corpora_of(study, corpus)[0]
        k = _nearest(emergence_k_options(study), min(k, study.vocab_size))
        em = study.emergence([k], [n], corpora=[corpus])
        return plots.emergence(
            em,
            title=f"{study.family} · {corpus}: p_(N={n}, k={k:,}) vs S",
            extrapolate=self.extrapolate_box.value,
        )


class KSweepView(_CorpusMixin, _KMixin, _View):
    """The k-sweep (paper Figure 6) with a k slider: R²(k) and α(k) of every corpus over the
    sweep's log-spaced k, a marker that moves along both curves with the slider, and α with its
    interval and R² at that k in the legend. The sweep is fitted once per family (`Study.ksweep`
    at `ks`, or the `sweep` passed in); moving the slider only redraws."""

    def __init__(
        self,
        study: Study,
        k: int = 1,
        corpus: str | None = None,
        family: str | None = None,
        ks: list[int] | None = None,
        sweep: pd.DataFrame | None = None,
        live: bool | None = None,
    ) -> None:
        super().__init__(study, family, live)
        self._ks = ks
        # A sweep the caller already fitted (`Study.ksweep`) serves the family the view opens on.
        self._sweeps: dict[str, pd.DataFrame] = {} if sweep is None else {self.family_dropdown.value: sweep}
        self.corpus_dropdown = self._corpus_dropdown(corpus or ALL_CORPORA, allow_all=True)
        self.k_slider = self._k_slider(k)
        for control in (self.k_slider, self.corpus_dropdown):
            control.observe(self.refresh, names="value")
        self.family_dropdown.observe(self._on_family, names="value")
        self.refresh()

    def sweep(self, family: str | None = None) -> pd.DataFrame:
        """A family's k-sweep (every corpus; default the selected family), fitted on first use."""
        family = self.family_dropdown.value if family is None else family
        if family not in self._sweeps:
            self._sweeps[family] = self.family_study(family).ksweep(self._ks)
        return self._sweeps[family]

    def _slider_options(self) -> list[tuple[str, int]]:
        """The sweep's k: the marker moves between fitted thresholds (set_k takes the closest)."""
        return [(f"{int(k):,}", int(k)) for k in sorted(self.sweep()["k"].unique())]

    def _on_family(self, change: dict) -> None:
        with self.hold_refresh():
            k = self.k
            old = self.corpus_dropdown.value
            self.corpus_dropdown.options = [ALL_CORPORA, *self.study.corpora]
            self.corpus_dropdown.value = old if old in self.corpus_dropdown.options else ALL_CORPORA
            options = self._slider_options()
            self.k_slider.options = options
            self.k_slider.value = _nearest(options, k)
        self.refresh()

    def _controls(self) -> list[w.Widget]:
        return [self.family_dropdown, self.corpus_dropdown, self.k_slider]

    def values(self) -> dict[str, Any]:
        return {**self._family_values(), "corpus": self.corpus_dropdown.value, "k": self.k}

    def controls(self) -> list[Control]:
        k = _slider_control("k", self._slider_options())
        return [*self._family_controls(), self._corpus_control(), k]

    def state(self, k: int, corpus: str, family: str | None = None) -> go.Figure:
        family = self.family_dropdown.value if family is None else family
        study = self.family_study(family)
        sweep = self.sweep(family)
        k = _nearest([(str(v), int(v)) for v in sorted(sweep["k"].unique())], k)
        sweep = sweep[sweep["corpus"].isin(self._corpora_of(study, corpus))]
        return plots.ksweep(
            sweep,
            vocab_size=study.vocab_size,
            marker_k=k,
            title=f"{study.family}: R²(k) and α(k), marker at k={k:,}",
        )


class RankDistributionView(_CorpusMixin, _View):
    """Rank histogram with the fitted discretised lognormal for each model of a corpus."""

    def __init__(
        self, study: Study, corpus: str | None = None, family: str | None = None, live: bool | None = None
    ) -> None:
        super().__init__(study, family, live)
        self.corpus_dropdown = self._corpus_dropdown(corpus, allow_all=False)
        self.corpus_dropdown.observe(self.refresh, names="value")
        self.family_dropdown.observe(self._on_family, names="value")
        self.refresh()

    def _controls(self) -> list[w.Widget]:
        return [self.family_dropdown, self.corpus_dropdown]

    def values(self) -> dict[str, Any]:
        return {**self._family_values(), "corpus": self.corpus_dropdown.value}

    def controls(self) -> list[Control]:
        corpus = self._corpus_control()
        return [*self._family_controls(), replace(corpus, slider=True)]  # the last control is a slider

    def state(self, corpus: str, family: str | None = None) -> go.Figure:
        study = self.family_study(family)
        corpus = self._corpora_of(study, corpus)[0]
        title = f"{study.family} · {corpus}: rank distribution"
        return plots.rank_distribution(study.rank_pmf(corpus), title=title)


TRAINING_COLUMNS = ("family", "corpus", "model", "S", "step", "D", "k", "neg_log_rbp", "ce")
# The training view's loss toggle: what each loss is, not only its symbol.
QUANTITY_LABELS = {"−log RBP_k = −log Pr(rank ≤ k)": "rbp", "cross-entropy (CE)": "ce"}


class TrainingView(_FigureView):
    """-log RBP_k (or CE) over training: against tokens seen D per size with power-law fits, and
    against S at one checkpoint, with sliders for k and the training step that redraw in place.

    Takes a tidy checkpoint table (`Study.training_table(ks)` or
    `rbplab.study.synthetic.synthetic_training_table`): the k slider offers the table's ks, the
    step slider its steps; `quantity` "rbp" or "ce"."""

    def __init__(
        self,
        table: pd.DataFrame,
        k: int | None = None,
        step: int | None = None,
        corpus: str | None = None,
        quantity: str = "rbp",
        live: bool | None = None,
    ) -> None:
        missing = [c for c in TRAINING_COLUMNS if c not in table.columns]
        if missing:
            raise InvalidArgumentError(f"a training table needs columns {missing}; see Study.training_table")
        table = table[table["D"] > 0]
        if table.empty:
            raise InvalidArgumentError("the training table has no checkpoint with D > 0")
        if quantity not in ("rbp", "ce"):
            raise InvalidArgumentError(f"quantity must be 'rbp' or 'ce', got {quantity!r}")
        super().__init__(live)
        self.table = table
        ks = sorted(int(v) for v in table["k"].unique())
        steps = sorted(int(v) for v in table["step"].unique())
        corpora = list(dict.fromkeys(table["corpus"]))
        if k is not None and k not in ks:
            raise InvalidArgumentError(f"k={k} is not in the table; it has k in {ks}")
        if step is not None and step not in steps:
            raise InvalidArgumentError(f"step {step} is not in the table; it has steps {steps}")
        if corpus is not None and corpus not in corpora:
            raise InvalidArgumentError(f"unknown corpus {corpus!r}; the table has {corpora}")
        # A table holds a few ks (the notebook's 1, 10, 100): one button each, not a slider of
        # three stops squeezed beside the others.
        self.k_buttons = w.ToggleButtons(
            options=[(f"k = {v:,}", v) for v in ks],
            value=ks[0] if k is None else k,
            description="k",
            style={"button_width": "auto"},
        )
        self.step_slider = w.SelectionSlider(
            options=[(f"{v:,}", v) for v in steps],
            value=steps[-1] if step is None else step,
            description="step",
            layout=w.Layout(width="480px", min_width="320px", flex="0 0 auto"),
        )
        self.corpus_dropdown = w.Dropdown(options=corpora, value=corpus or corpora[0], description="corpus")
        self.quantity_toggle = w.ToggleButtons(
            options=list(QUANTITY_LABELS.items()),
            value=quantity,
            description="loss",
            style={"button_width": "auto"},
        )
        for control in (self.k_buttons, self.step_slider, self.corpus_dropdown, self.quantity_toggle):
            control.observe(self.refresh, names="value")
        self.refresh()

    @property
    def k(self) -> int:
        return int(self.k_buttons.value)

    @property
    def step(self) -> int:
        return int(self.step_slider.value)

    def set_k(self, k: int) -> None:
        values = [v for _, v in self.k_buttons.options]
        if k not in values:
            raise InvalidArgumentError(f"k={k} is not in the table; choose from {values}")
        self.k_buttons.value = int(k)

    def set_step(self, step: int) -> None:
        values = [v for _, v in self.step_slider.options]
        if step not in values:
            raise InvalidArgumentError(f"step {step} is not in the table; choose from {values}")
        self.step_slider.value = int(step)

    def set_corpus(self, corpus: str) -> None:
        if corpus not in self.corpus_dropdown.options:
            raise InvalidArgumentError(
                f"unknown corpus {corpus!r}; choose from {list(self.corpus_dropdown.options)}"
            )
        self.corpus_dropdown.value = corpus

    def _controls(self) -> list[w.Widget]:
        return [self.corpus_dropdown, self.quantity_toggle, self.k_buttons, self.step_slider]

    def selection(self, corpus: str | None = None, k: int | None = None) -> pd.DataFrame:
        """The rows the figure draws: the chosen corpus and k (default: the controls')."""
        t = self.table
        corpus = self.corpus_dropdown.value if corpus is None else corpus
        return t[(t["corpus"] == corpus) & (t["k"] == (self.k if k is None else k))]

    def values(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus_dropdown.value,
            "quantity": self.quantity_toggle.value,
            "k": self.k,
            "step": self.step,
        }

    def controls(self) -> list[Control]:
        return [
            _dropdown_control("corpus", list(self.corpus_dropdown.options)),
            _dropdown_control("quantity", list(self.quantity_toggle.options)),
            _dropdown_control("k", list(self.k_buttons.options)),
            _slider_control("step", list(self.step_slider.options)),
        ]

    def state(self, corpus: str, quantity: str, k: int, step: int) -> go.Figure:
        y = "neg_log_rbp" if quantity == "rbp" else "ce"
        label = f"-log RBP_{k:,}" if y == "neg_log_rbp" else "CE (nats)"
        sel = self.selection(corpus, k)
        fits = data_scaling.data_fits(sel, y=y, by=["family", "corpus", "k"])
        return plots.training_dynamics(
            sel, fits, y=y, y_label=label, step=step, title=f"{corpus}: {label} over training"
        )
