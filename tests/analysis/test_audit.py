"""The prediction audit: coverage of its interval on a family with a known law, and a bending law flagged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rbplab.analysis import fit
from rbplab.core import TokenStats
from rbplab.core.runs import Run
from rbplab.study import Study, decomposition
from rbplab.study.synthetic import synthetic_study

SIZES = np.array([1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9])


def _family(y: np.ndarray, group: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "family": "f",
            "corpus": f"c{group}",
            "model": [f"m{i}" for i in range(len(y))],
            "S": SIZES,
            "loss": y,
        }
    )


def test_interval_matches_the_textbook_formula():
    rng = np.random.default_rng(0)
    y = 2.0 * SIZES**-0.1 * np.exp(rng.normal(0, 0.02, len(SIZES)))
    audit = fit.prediction_audit(_family(y), n_holdouts=[2], level=0.9)
    assert len(audit) == 2 and (audit["n_fit"] == 5).all()
    x, z = np.log(SIZES[:5]), np.log(y[:5])
    slope, intercept = np.polyfit(x, z, 1)
    resid = z - (intercept + slope * x)
    s = np.sqrt(resid @ resid / 3)
    for _, row in audit.iterrows():
        x0 = np.log(row["x"])
        centre = intercept + slope * x0
        half = (
            sps.t.ppf(0.95, 3) * s * np.sqrt(1 + 1 / 5 + (x0 - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
        )
        assert row["loss_predicted"] == pytest.approx(np.exp(centre), rel=1e-10)
        assert row["loss_predicted_low"] == pytest.approx(np.exp(centre - half), rel=1e-10)
        assert row["loss_predicted_high"] == pytest.approx(np.exp(centre + half), rel=1e-10)
        obs = y[list(SIZES).index(row["x"])]
        assert row["interval_units"] == pytest.approx((np.log(obs) - centre) / half, rel=1e-9)
        assert row["covered"] == (abs(row["interval_units"]) <= 1)


@pytest.mark.statistical  # 600 simulated families
def test_coverage_near_nominal_on_a_known_law():
    """Log-normal scatter around an exact power law: the t interval covers a new model with
    probability `level` exactly, so over 600 families coverage is 0.95 within binomial noise."""
    rng = np.random.default_rng(42)
    n_rep = 600
    frames = [
        _family(3.0 * SIZES**-0.08 * np.exp(rng.normal(0, 0.03, len(SIZES))), group=i) for i in range(n_rep)
    ]
    audit = fit.prediction_audit(pd.concat(frames), n_holdouts=(1, 2), level=0.95)
    summary = fit.audit_summary(audit).set_index("n_holdout")
    assert summary.loc[1, "n"] == n_rep and summary.loc[2, "n"] == 2 * n_rep
    se = np.sqrt(0.95 * 0.05 / n_rep)
    for n_out in (1, 2):
        assert abs(summary.loc[n_out, "coverage"] - 0.95) < 4 * se, summary
    # no systematic error: the mean log error is near zero, relative to the scatter
    assert abs(summary.loc[1, "mean_log_error"]) < 0.01


def test_a_bending_law_is_flagged():
    """The law holds up to 1e8 parameters and flattens beyond (exponent 0.1 -> 0.01): fitted on
    the smaller models, it predicts the larger ones too low, outside its interval, every error of
    one sign and growing with the distance."""
    rng = np.random.default_rng(1)
    clean = np.where(SIZES <= 1e8, 3.0 * SIZES**-0.1, 3.0 * 1e8**-0.1 * (SIZES / 1e8) ** -0.01)
    y = clean * np.exp(rng.normal(0, 0.01, len(SIZES)))
    audit = fit.prediction_audit(_family(y), n_holdouts=(1, 2))
    assert (audit["log_error"] > 0).all()  # observed above predicted: the law bends upwards
    # fitted on the sizes up to the bend (two held out), both predictions miss their interval
    two = audit[audit["n_holdout"] == 2].sort_values("x")
    assert not two["covered"].any() and (two["interval_units"] > 1.5).all()
    assert two["log_error"].is_monotonic_increasing
    # the same draws without the bend pass
    straight = fit.prediction_audit(_family(3.0 * SIZES**-0.1 * np.exp(rng.normal(0, 0.01, len(SIZES)))))
    assert straight["covered"].all()

    # A smooth floor (loss = E + A S^-alpha) bends inside the fitted range too: the residual
    # scatter then widens the interval, and what flags it is one sign of error growing with
    # the distance, which `audit_summary` reports as mean_log_error.
    floor = (1.5 + 4.0 * SIZES**-0.15) * np.exp(rng.normal(0, 0.002, len(SIZES)))
    audit = fit.prediction_audit(_family(floor), n_holdouts=(1, 2))
    assert (audit["log_error"] > 0).all()
    assert not audit.sort_values("interval_units")["covered"].iloc[-1]


def test_two_fitted_points_have_no_interval():
    y = 2.0 * SIZES**-0.1 * np.exp(np.linspace(-0.01, 0.01, len(SIZES)))
    audit = fit.prediction_audit(_family(y).iloc[:3], n_holdouts=[1])
    assert (
        len(audit) == 1 and pd.isna(audit["covered"].iloc[0]) and pd.isna(audit["loss_predicted_low"].iloc[0])
    )


def test_study_audit_along_size_and_along_tokens():
    study = synthetic_study(sizes=(1e5, 3e5, 1e6, 3e6, 1e7), corpora=("a", "b"), n_tokens=6000)
    audit = decomposition.prediction_audit(study, ks=(1, 10), n_holdouts=(1, 2), metrics=("rbp", "ce", "ee"))
    assert set(audit["metric"]) == {"rbp", "ce", "ee"}
    # per corpus: 2 rbp ks + ce + ee = 4 series, each with 1 + 2 held-out rows
    assert len(audit) == 2 * 4 * 3
    assert set(audit.loc[audit["n_holdout"] == 1, "held_out"]) == {study.runs[-1].model}
    # the CE row is the audit of the per-run CE the study reports
    ce = audit[(audit["metric"] == "ce") & (audit["n_holdout"] == 1) & (audit["corpus"] == "a")].iloc[0]
    summ = study.run_table()
    want = summ[(summ["corpus"] == "a") & (summ["model"] == ce["held_out"])]["ce"].iloc[0]
    assert ce["loss_observed"] == pytest.approx(want, rel=1e-12)

    # along D: two models, four checkpoints each, ranks improving with the tokens seen
    rng = np.random.default_rng(0)
    runs = []
    for m, S in enumerate((1e6, 4e6)):
        for step, D in zip((100, 200, 400, 800), (1e8, 2e8, 4e8, 8e8), strict=True):
            mu = 3.0 - 0.2 * m - 0.3 * np.log(D / 1e8)
            ranks = np.clip(np.round(np.exp(rng.normal(mu, 1.5, 4000))), 1, 4000).astype(np.int64)
            stats = TokenStats.from_ranks(ranks, 4096, nll=0.3 + 0.9 * np.log(ranks))
            run = Run("toy", f"toy-{m}@step{step}", "a", S, stats)
            runs.append(dataclasses.replace(run, revision=f"step{step}", step=step, D=D))
    along_d = decomposition.prediction_audit(
        Study(runs), ks=(1,), n_holdouts=(1,), metrics=("rbp", "ee"), along="D"
    )
    assert set(along_d["model"]) == {"toy-0", "toy-1"}
    assert (along_d["held_out"] == "step800").all() and (along_d["D"] == 8e8).all()
    assert (along_d["n_fit"] == 3).all() and len(along_d) == 4
    with pytest.raises(ValueError, match="checkpoints"):
        decomposition.prediction_audit(study, along="D")
