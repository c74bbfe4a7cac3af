"""The k-sweep's R² threshold includes its bound: R² equal to the threshold keeps the law's range."""

from __future__ import annotations

import pandas as pd

from rbplab.analysis import ksweep


def test_an_r2_equal_to_the_threshold_keeps_the_range():
    sweep = pd.DataFrame(
        {
            "family": "a",
            "corpus": "prose",
            "k": [1, 10, 100],
            "regime": ["k=1", "moderate", "moderate"],
            "alpha": [0.05, 0.04, 0.03],
            "alpha_low": [0.01, 0.01, 0.01],
            "r2": [0.95, 0.9, 0.95],
        }
    )
    out = ksweep.sweep_summary(sweep, r2_threshold=0.9).iloc[0]
    assert out["k_max_r2"] == 100 and out["k_max_law"] == 100
    assert ksweep.sweep_summary(sweep, r2_threshold=0.91).iloc[0]["k_max_r2"] == 1
