"""What every view shares: its frontend (ipywidgets in the lab, plotly frames in a report) and its base.

What the kernel's front end renders and how a figure reaches it: `live_frontend` (is a
widget front end attached?), `show` (a figure as the plotly mime bundle) and `sync_figure`
(a new figure copied into the shown one in place).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go
from IPython.display import display

from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, RunFailedError
from rbplab.study import Study
from rbplab.viz.layout import untemplated
from rbplab.viz.states import MAX_STATES, Control, explorer

STATIC_ENV = "RBPLAB_STATIC_FIGURES"  # "1": always add static figures, "0": never, unset: detect
_HEADLESS_PARENTS = ("papermill", "nbclient", "nbconvert")
PLOTLY_MIME = "application/vnd.plotly.v1+json"


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


ALL_CORPORA = "(all corpora)"
ALL_FAMILIES = "(all families)"


def k_options(vocab_size: int, n: int = 160) -> list[tuple[str, int]]:
    # Integer k on a log scale from 1 to |V|: a selection slider shows exact integer values.
    ks = np.unique(np.round(np.logspace(0, np.log10(vocab_size), n)).astype(int))
    ks = np.unique(np.r_[ks, [1, 10, 100, 1000, vocab_size]])
    ks = ks[(ks >= 1) & (ks <= vocab_size)]
    return [(f"{k:,}", int(k)) for k in ks]


def nearest(options: list[tuple[str, int]], k: int) -> int:
    values = np.array([v for _, v in options])
    return int(values[np.argmin(np.abs(np.log(values) - np.log(max(k, 1))))])


def slider_control(name: str, options: list[tuple[str, int]], title: str | None = None) -> Control:
    return Control(name, tuple(v for _, v in options), tuple(label for label, _ in options), title=title)


def dropdown_control(name: str, options: list, title: str | None = None) -> Control:
    """A menu of `options` for the keyword `name`, shown as `title` (the live widget's
    description) when that differs."""
    pairs = [o if isinstance(o, tuple) else (str(o), o) for o in options]
    return Control(
        name, tuple(v for _, v in pairs), tuple(label for label, _ in pairs), slider=False, title=title
    )


class FigureView:
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

    def prepare(self, states: list[dict[str, Any]]) -> None:
        """Given the values of every state the offline explorer will draw, before it draws them:
        a view whose states share work computes it here, once (the default: nothing)."""

    def build(self) -> go.Figure:
        """The figure for the current control values (a plain plotly Figure)."""
        return self.state(**self.values())

    def explorer(self, max_states: int = MAX_STATES) -> dict:
        """The offline explorer: `state` over every value of the controls, as one plotly figure
        (JSON) whose sliders and dropdowns switch between the states without a kernel."""
        return explorer(
            self.controls(),
            self.state,
            self.values(),
            max_states=max_states,
            fixed=self.fixed(),
            prepare=self.prepare,
        )

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


class View(FigureView):
    """A view of a `Study`, with a family dropdown when it holds several families."""

    def __init__(self, study: Study, family: str | None = None, live: bool | None = None) -> None:
        if not isinstance(study, Study):
            raise InvalidTypeError(f"a view needs a rbplab.study.Study, got {type(study).__name__}")
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
        return [dropdown_control("family", options)] if len(options) > 1 else []

    def set_family(self, family: str) -> None:
        if family not in self.family_dropdown.options:
            raise InvalidArgumentError(
                f"unknown family {family!r}; choose from {list(self.family_dropdown.options)}"
            )
        self.family_dropdown.value = family


class CorpusMixin:
    def _corpus_options(self) -> list[str]:
        # Of one corpus, "(all corpora)" draws what the corpus does: a choice that changes nothing.
        many = self._allow_all and len(self.study.corpora) > 1
        return ([ALL_CORPORA] if many else []) + list(self.study.corpora)

    def _corpus_dropdown(self, corpus: str | None, allow_all: bool) -> w.Dropdown:
        self._allow_all = allow_all
        options = self._corpus_options()
        # Default: one corpus, the lightest figure to redraw while dragging.
        value = corpus if corpus is not None else self.study.corpora[0]
        if value == ALL_CORPORA and allow_all and value not in options:
            value = options[0]  # the study's one corpus is all of them
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
        return dropdown_control("corpus", list(self.corpus_dropdown.options))

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
            options = self._corpus_options()
            self.corpus_dropdown.options = options
            self.corpus_dropdown.value = old if old in options else self.study.corpora[0]
            if hasattr(self, "k_slider"):
                k = self.k
                self.k_slider.options = self._slider_options()
                self.k_slider.value = nearest(list(self.k_slider.options), min(k, self.study.vocab_size))
        self.refresh()


class KMixin:
    def _slider_options(self) -> list[tuple[str, int]]:
        return k_options(self.study.vocab_size)

    def _k_slider(self, k: int, description: str = "k") -> w.SelectionSlider:
        options = self._slider_options()
        return w.SelectionSlider(
            options=options,
            value=nearest(options, k),
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
        self.k_slider.value = nearest(list(self.k_slider.options), int(k))


class CorpusKMixin(CorpusMixin, KMixin):
    """A view whose controls are the family, a corpus menu and a k slider (ScalingView,
    KSweepView): the widgets, their values and their offline controls in that one order."""

    def _controls(self) -> list[w.Widget]:
        return [self.family_dropdown, self.corpus_dropdown, self.k_slider]

    def values(self) -> dict[str, Any]:
        return {**self._family_values(), "corpus": self.corpus_dropdown.value, "k": self.k}

    def controls(self) -> list[Control]:
        k = slider_control("k", self._slider_options())
        return [*self._family_controls(), self._corpus_control(), k]
