"""`RankDistributionView`: the rank histogram and its fitted lognormal per model (paper
Figure 8)."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import plotly.graph_objects as go

from rbplab.study import Study, distribution
from rbplab.viz import plots
from rbplab.viz.states import Control
from rbplab.viz.widgets.base import (
    CorpusMixin,
    View,
)


class RankDistributionView(CorpusMixin, View):
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
        return [*self._family_controls(), self._corpus_control()]  # a menu of corpora, as live

    def state(self, corpus: str, family: str | None = None) -> go.Figure:
        study = self.family_study(family)
        corpus = self._corpora_of(study, corpus)[0]
        title = f"{study.family} · {corpus}: rank distribution"
        return plots.rank_distribution(distribution.rank_pmf(study, corpus), title=title)
