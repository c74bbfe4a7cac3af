"""Alternative scaling-law forms: pooled F-test, offset form."""

import numpy as np
import pandas as pd
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
    assert not f.alpha_at_grid_edge and f.r2_loss == pytest.approx(1.0) and f.r2_log == pytest.approx(1.0)
    rising = fit_offset_power_law(S, 1 + 0.01 * np.log(S))  # would need A < 0: clamp to A = 0
    assert rising.A == 0.0 and rising.E == pytest.approx(np.mean(1 + 0.01 * np.log(S)))
    out = offset_fits(power_table(families=("a", "b")))
    assert list(out["family"]) == ["a", "b"] and np.all(out["E"] >= 0) and np.all(out["A"] >= 0)
    with pytest.raises(ValueError, match="three"):
        fit_offset_power_law(S[:2], [1.0, 0.9])


def test_offset_r2_on_the_plain_fits_scale():
    S = np.geomspace(1e6, 1e10, 6)
    y = np.array([3.1, 2.6, 2.35, 2.1, 2.02, 1.93])
    f = fit_offset_power_law(S, y)
    pred = f.E + f.A * S**-f.alpha
    z = np.log(y)
    r2_log = 1 - np.sum((z - np.log(pred)) ** 2) / np.sum((z - z.mean()) ** 2)
    assert f.r2_log == pytest.approx(r2_log, rel=1e-12)
    assert f.r2_log_adj == pytest.approx(1 - (1 - r2_log) * 5 / 3, rel=1e-12)
    assert f.r2_loss == pytest.approx(1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-9)
    table = pd.DataFrame({"model": list("abcdef"), "S": S, "loss": y})
    row = offset_fits(table, by=[]).iloc[0]
    slope, intercept = np.polyfit(np.log(S), z, 1)
    plain = 1 - np.sum((z - intercept - slope * np.log(S)) ** 2) / np.sum((z - z.mean()) ** 2)
    assert row["plain_r2_log_adj"] == pytest.approx(1 - (1 - plain) * 5 / 4, rel=1e-9)
    assert row["r2_log_adj"] == pytest.approx(f.r2_log_adj)
