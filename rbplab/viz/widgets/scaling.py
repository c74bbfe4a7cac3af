"""`ScalingView`: -log RBP_k against S at any k (paper Figures 3-5)."""

from __future__ import annotations

import plotly.graph_objects as go

from rbplab.study import Study, size
from rbplab.viz import plots
from rbplab.viz.widgets.base import (
    CorpusKMixin,
    View,
    k_options,
    nearest,
)


class ScalingView(CorpusKMixin, View):
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

    def state(self, k: int, corpus: str, family: str | None = None) -> go.Figure:
        study = self.family_study(family)
        k = nearest(k_options(study.vocab_size), min(k, study.vocab_size))
        points = study.points([k], corpora=self._corpora_of(study, corpus))
        fits = size.fits(study, [k], points=points)
        bands = size.bands(study, [k], points=points)
        return plots.rbp_vs_size(
            points,
            fits,
            bands,
            title=f"{study.family}: -log RBP_k vs S at k={k:,} (|V|={study.vocab_size:,})",
        )
