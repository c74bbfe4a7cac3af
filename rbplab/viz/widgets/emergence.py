"""`EmergenceView`: sequence success p_{N,k} against S with N and k sliders (paper Figure 7),
the k it opens on (`visible_k`) and the k and N its explorer holds."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.stats import EntrySummary
from rbplab.study import Study, emergence
from rbplab.viz import plots
from rbplab.viz.states import Control
from rbplab.viz.widgets.base import (
    CorpusMixin,
    KMixin,
    View,
    k_options,
    nearest,
    slider_control,
)


def emergence_k_options(study: Study) -> list[tuple[str, int]]:
    """The k at which every run of `study` gives sequence success: any k (`k_options`) when the
    runs hold their tokens; for runs read from the cache, the k grid their summaries keep, since
    a summary holds hit runs at those k only (not at |V| either, where p_{N,k} = 1 anyway)."""
    grids = [
        {int(k) for k in run.stats.ks}
        for run in study.runs
        if isinstance(run.stats, EntrySummary) and run.stats.stats is None
    ]
    if not grids:
        return k_options(study.vocab_size)
    ks = sorted(k for k in set.intersection(*grids) if 1 <= k <= study.vocab_size)
    return [(f"{k:,}", k) for k in ks]


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


class EmergenceView(CorpusMixin, KMixin, View):
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
        # The explorer's tables while it draws (`prepare`), by family and corpus; empty live.
        self._tables: dict[tuple[str, str], pd.DataFrame] = {}
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
                    reach=int(self.n_slider.max), title=self.n_slider.description),
            slider_control("k", self._slider_options()),
        ]  # fmt: skip

    def fixed(self) -> dict[str, str]:
        return {"extrapolate": "on" if self.extrapolate_box.value else "off"}

    def explorer(self, max_states: int = EMERGENCE_STATES) -> dict:
        # A state's figure takes ~0.08 s to build: fewer of them keep notebook 03 quick.
        try:
            return super().explorer(max_states)
        finally:
            self._tables = {}

    def prepare(self, states: list[dict[str, Any]]) -> None:
        # One table per family and corpus over every k and N the explorer draws: a run's window
        # sums share their prefix sums across k and N, so the grid costs about what two states
        # did one by one (notebook 03's explorer on the demo: 24.5 s before, see CHANGELOG).
        grids: dict[tuple[str, str], tuple[set[int], set[int]]] = {}
        for values in states:
            study, corpus, k = self._resolved(values["k"], values["corpus"], values.get("family"))
            ks, ns = grids.setdefault((study.family, corpus), (set(), set()))
            ks.add(k)
            ns.add(int(values["n"]))
        self._tables = {
            (family, corpus): emergence.table(
                self.family_study(family), sorted(ks), sorted(ns), corpora=[corpus]
            )
            for (family, corpus), (ks, ns) in grids.items()
        }

    def _resolved(self, k: int, corpus: str, family: str | None) -> tuple[Study, str, int]:
        study = self.family_study(family)
        corpus = self._corpora_of(study, corpus)[0]
        return study, corpus, nearest(emergence_k_options(study), min(k, study.vocab_size))

    def state(self, k: int, n: int, corpus: str, family: str | None = None) -> go.Figure:
        study, corpus, k = self._resolved(k, corpus, family)
        grid = self._tables.get((study.family, corpus))
        em = None if grid is None else grid[(grid["k"] == k) & (grid["N"] == n)].reset_index(drop=True)
        if em is None or em.empty:  # live, one state at a time
            em = emergence.table(study, [k], [n], corpora=[corpus])
        return plots.emergence(
            em,
            title=f"{study.family} · {corpus}: p_(N={n}, k={k:,}) vs S",
            extrapolate=self.extrapolate_box.value,
        )
