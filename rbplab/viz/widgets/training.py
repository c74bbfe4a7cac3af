"""`TrainingView`: -log RBP_k or CE over training checkpoints."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

from rbplab.analysis import data_scaling
from rbplab.core.errors import InvalidArgumentError
from rbplab.viz import plots
from rbplab.viz.layout import templating
from rbplab.viz.plots.training import move_step
from rbplab.viz.states import Control
from rbplab.viz.widgets.base import (
    FigureView,
    dropdown_control,
    slider_control,
)

TRAINING_COLUMNS = ("family", "corpus", "model", "S", "step", "D", "k", "neg_log_rbp", "ce")
# Figures kept to copy from (one per corpus, loss, k and templating): the explorer's states and a
# revisited k then cost a copy and a moved step instead of a build; bounded for studies of many corpora.
KEPT_FIGURES = 24
# The training view's loss toggle: what each loss is, not only its symbol.
QUANTITY_LABELS = {"−log RBP_k = −log Pr(rank ≤ k)": "rbp", "cross-entropy (CE)": "ce"}


class TrainingView(FigureView):
    """-log RBP_k (or CE) over training: against tokens seen D per size with power-law fits, and
    against S at one checkpoint, with sliders for k and the training step that redraw in place.

    Takes a tidy checkpoint table (`rbplab.study.training.table(study, ks)` or
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
            raise InvalidArgumentError(
                f"a training table needs columns {missing}; see rbplab.study.training.table"
            )
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
        # Per-size fits do not depend on the step: fitted once per corpus, k and loss.
        self._fits: dict[tuple[str, int, str], pd.DataFrame] = {}
        self._figures: dict[tuple, go.Figure] = {}
        self._drawn: tuple[str, str, int] | None = None  # the corpus, loss and k the figure shows
        self.refresh()

    def refresh(self, *_: object) -> None:
        """Redraw for the controls' values. A move of the step slider alone changes only the
        step's trace, line and panel title: those are moved in place (`plots.training.move_step`)
        instead of rebuilding every size's checkpoints and fits, so a slider step costs the same
        on 5 checkpoints as on 154."""
        if self._held:
            return
        drawn = (self.corpus_dropdown.value, self.quantity_toggle.value, self.k)
        if self.updates and drawn == self._drawn:
            y = "neg_log_rbp" if drawn[1] == "rbp" else "ce"
            if move_step(self.figure, self.selection(drawn[0], drawn[2]), y, self.step):
                self.updates += 1
                return
        super().refresh()
        self._drawn = drawn

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
            dropdown_control("corpus", list(self.corpus_dropdown.options)),
            dropdown_control(
                "quantity", list(self.quantity_toggle.options), title=self.quantity_toggle.description
            ),
            dropdown_control("k", list(self.k_buttons.options)),
            slider_control("step", list(self.step_slider.options)),
        ]

    def state(self, corpus: str, quantity: str, k: int, step: int) -> go.Figure:
        y = "neg_log_rbp" if quantity == "rbp" else "ce"
        label = f"-log RBP_{k:,}" if y == "neg_log_rbp" else "CE (nats)"
        sel = self.selection(corpus, k)
        key = (corpus, y, k, templating())
        kept = self._figures.get(key)
        if kept is not None:
            # Only the step differs from a figure drawn before: a copy with the step moved.
            figure = go.Figure(kept)
            if move_step(figure, sel, y, step):
                return figure
        fits = self._fits.get((corpus, k, y))
        if fits is None:
            fits = self._fits[(corpus, k, y)] = data_scaling.data_fits(sel, y=y, by=["family", "corpus", "k"])
        figure = plots.training_dynamics(
            sel, fits, y=y, y_label=label, step=step, title=f"{corpus}: {label} over training"
        )
        if kept is None:
            if len(self._figures) >= KEPT_FIGURES:
                del self._figures[next(iter(self._figures))]  # the oldest
            self._figures[key] = go.Figure(figure)  # a copy: callers may change what they get
        return figure
