"""Alternative scaling-law forms: pooled F-test, offset form."""

import numpy as np
import pytest
from helpers.factories import power_table

from rbplab.analysis.alternatives import fit_offset_power_law, offset_fits, pooled_fits


def test_pooled_fit_and_shared_slope_test():
    same = pooled_fits(power_table(alpha=[0.08, 0.08, 0.08], noise=0.01, seed=3, families=("a", "b", "c")))
    assert len(same) == 3 and same["alpha"].nunique() == 1
    assert same.loc[0, "alpha"] == pytest.approx(0.08, abs=0.005) and same.loc[0, "p_value"] > 0.01
    assert same.loc[0, "df_num"] == 2 and same.loc[0, "df_den"] == 18 - 6
    differ = pooled_fits(power_table(alpha=[0.05, 0.12], noise=0.01, seed=3, families=("a", "b")))
    assert differ.loc[0, "p_value"] < 1e-6
    np.testing.assert_allclose(differ["alpha_separate"], [0.05, 0.12], atol=0.01)


def test_offset_power_law():
    S = np.geomspace(1e6, 1e11, 8)
    f = fit_offset_power_law(S, 1.7 + 40 * S**-0.25)
    assert (f.E, f.alpha) == pytest.approx((1.7, 0.25), rel=1e-4) and f.A == pytest.approx(40, rel=1e-3)
    assert not f.alpha_at_grid_edge and f.r2 == pytest.approx(1.0)
    rising = fit_offset_power_law(S, 1 + 0.01 * np.log(S))  # would need A < 0: clamp to A = 0
    assert rising.A == 0.0 and rising.E == pytest.approx(np.mean(1 + 0.01 * np.log(S)))
    out = offset_fits(power_table(families=("a", "b")))
    assert list(out["family"]) == ["a", "b"] and np.all(out["E"] >= 0) and np.all(out["A"] >= 0)
    with pytest.raises(ValueError, match="three"):
        fit_offset_power_law(S[:2], [1.0, 0.9])
