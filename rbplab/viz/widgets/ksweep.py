"""`KSweepView`: R²(k) and α(k) with a marker at the slider's k (paper Figure 6)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from rbplab.study import Study, size
from rbplab.viz import plots
from rbplab.viz.widgets.base import (
    ALL_CORPORA,
    CorpusKMixin,
    View,
    nearest,
)


class KSweepView(CorpusKMixin, View):
    """The k-sweep (paper Figure 6) with a k slider: R²(k) and α(k) of every corpus over the
    sweep's log-spaced k, a marker that moves along both curves with the slider, and α with its
    interval and R² at that k in the legend. The sweep is fitted once per family (`rbplab.study.size.ksweep`
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
        # A sweep the caller already fitted (`rbplab.study.size.ksweep`) serves the family the view opens on.
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
            self._sweeps[family] = size.ksweep(self.family_study(family), self._ks)
        return self._sweeps[family]

    def _slider_options(self) -> list[tuple[str, int]]:
        """The sweep's k: the marker moves between fitted thresholds (set_k takes the closest)."""
        return [(f"{int(k):,}", int(k)) for k in sorted(self.sweep()["k"].unique())]

    def _on_family(self, change: dict) -> None:
        with self.hold_refresh():
            k = self.k
            old = self.corpus_dropdown.value
            self.corpus_dropdown.options = self._corpus_options()
            self.corpus_dropdown.value = (
                old if old in self.corpus_dropdown.options else self._corpus_options()[0]
            )
            options = self._slider_options()
            self.k_slider.options = options
            self.k_slider.value = nearest(options, k)
        self.refresh()

    def state(self, k: int, corpus: str, family: str | None = None) -> go.Figure:
        family = self.family_dropdown.value if family is None else family
        study = self.family_study(family)
        sweep = self.sweep(family)
        k = nearest([(str(v), int(v)) for v in sorted(sweep["k"].unique())], k)
        sweep = sweep[sweep["corpus"].isin(self._corpora_of(study, corpus))]
        return plots.ksweep(
            sweep,
            vocab_size=study.vocab_size,
            marker_k=k,
            title=f"{study.family}: R²(k) and α(k), marker at k={k:,}",
        )
