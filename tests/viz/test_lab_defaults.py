"""`make lab` after `make demo`: notebook 06 with its default parameters analyses the checkpoints
the demo scored (found in the cache), and falls back to synthetic checkpoints only when none are
cached."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.studies import copy_cache

from rbplab.catalog import registry
from rbplab.catalog.registry import schedule_of
from rbplab.cli.demo import DEMO_REVISIONS
from rbplab.report.execution import execute_notebook
from rbplab.store.paths import notebooks_dir
from rbplab.study.loading import default_corpora

NOTEBOOK = "06_training_dynamics"


def _micro_with_checkpoints() -> pd.DataFrame:
    try:
        members = registry.family_models("micro")
    except (registry.UnknownFamilyError, FileNotFoundError):
        pytest.skip("no micro family in the registry")
    if any(schedule_of(m) is None for m in members["model"]):
        pytest.skip("the micro-suite's checkpoint schedules are not in data/")
    return members


def _run_defaults(out: Path) -> tuple[bool, str | None, list[str]]:
    """Notebook 06 as the lab opens it: no parameter but a small bootstrap (the lookup's parameters
    at their defaults; the cache is $RBPLAB_CACHE)."""
    result = execute_notebook(notebooks_dir() / f"{NOTEBOOK}.ipynb", out, {"n_boot": 5})
    cells = json.loads((out / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    shown = [json.dumps(o.get("data", {})) for c in cells for o in c.get("outputs", [])]
    return result.ok, result.error, shown


@pytest.mark.slow
@pytest.mark.notebook
def test_lab_defaults_find_the_checkpoints_the_demo_scored(tmp_path, monkeypatch, demo_checkpoints_template):
    members = _micro_with_checkpoints()
    cache = tmp_path / "cache"
    monkeypatch.setenv("RBPLAB_CACHE", str(cache))
    # Before the demo: nothing cached, so the notebook says loudly that it is synthetic.
    ok, error, shown = _run_defaults(tmp_path / "before")
    assert ok, error
    assert any("SYNTHETIC DATA" in text for text in shown)
    assert (tmp_path / "before" / NOTEBOOK / "banner.txt").is_file()

    # The demo's own scoring step (the same function, a smaller token cap), on the bundled corpora:
    # run once per session (tests/conftest.py) and its cache copied into this one.
    scored, table = demo_checkpoints_template
    assert table is not None and table["revisions"] == DEMO_REVISIONS
    copy_cache(scored, cache)
    ok, error, shown = _run_defaults(tmp_path / "after")
    assert ok, error
    assert not any("SYNTHETIC DATA" in text for text in shown)
    assert not (tmp_path / "after" / NOTEBOOK / "banner.txt").exists()
    checkpoints = pd.read_csv(tmp_path / "after" / NOTEBOOK / "checkpoints.csv")
    assert sorted(set(checkpoints["corpus"])) == sorted(default_corpora())
    assert sorted(set(checkpoints["S"])) == pytest.approx(sorted(set(members["S"].astype(float))))
    steps = sorted(
        {schedule_of(m).step_of(r) for m in members["model"] for r in schedule_of(m).select(DEMO_REVISIONS)}
    )
    assert sorted(set(checkpoints["step"])) == steps  # exactly the revisions the demo scored
    headline = pd.read_csv(tmp_path / "after" / NOTEBOOK / "headline.csv")
    assert (headline["source"] == "checkpoints").all()
