"""A study file drives the report: the grid that was run is the grid the notebooks analyse."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.studies import MICRO_MAX_TOKENS, copy_cache, micro_present, write_study

from rbplab.grid import Grid
from rbplab.report import ReportOptions, execution, run_report
from rbplab.runner import run_study
from rbplab.store.paths import notebooks_dir

pytestmark = pytest.mark.notebook  # every test here executes notebooks


@pytest.mark.slow  # executes a notebook
def test_report_of_a_study_file(tmp_path, gpt2_dir, neox_dir, llama_dir):
    study = write_study(tmp_path, gpt2_dir, neox_dir, llama_dir)
    cache = tmp_path / "cache"
    assert run_study(Grid.read(study), cache_dir=cache, progress=False).ok
    table = run_report(
        Grid.read(study),
        tmp_path / "out",
        cache_dir=cache,
        parameters={"n_boot": 10, "ks": [1, 10]},
        options=ReportOptions(notebooks=("01_rbp_vs_size",)),
        progress=None,
    )
    assert table["ok"].all(), table["error"].tolist()
    runs = pd.read_csv(tmp_path / "out" / "01_rbp_vs_size" / "runs.csv")
    members = Grid.read(study).members
    assert sorted(runs["model"].unique()) == sorted(m.model for m in members)
    assert sorted(runs["corpus"].unique()) == ["first", "second"] and len(runs) == 6
    assert (runs["family"] == "custom").all()


# ---------------------------------------------------------------------------------------------
# The README's report line, on a small real cache of the micro-suite (final models on two corpora,
# 3 checkpoints per size on prose), as `make demo` fills a big one: the `micro_cache` fixture
# (tests/conftest.py), a private copy of the session's.

MAX_TOKENS = MICRO_MAX_TOKENS


def _files(root: Path, skip: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and skip not in p.parents}


# From the clone's root the README's line runs as written, every notebook; from another folder two
# notebooks are enough to run two threads at once (what left the process in a stale folder).
WHERE = {"clone root": (), "another folder": ("--notebook", "01", "02")}


@pytest.mark.slow  # executes notebooks
@pytest.mark.parametrize("where", list(WHERE))
def test_readme_report_line_with_a_relative_output_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, micro_cache: Path, where: str
) -> None:
    """`rbplab report -c prose humaneval -o reports/` from a clone's root and from another folder:
    every notebook run ok (they run in threads, two at once), index.html written, and nothing
    written outside the output folder, and the process's working directory never changed
    (papermill's `cwd` once moved the whole process into notebooks/; its file layer chdir's around
    every notebook it reads or writes, and two notebook threads left the process in a stale folder)."""
    from rbplab.cli import app as cli

    clone = tmp_path / "clone"
    shutil.copytree(notebooks_dir(), clone / "notebooks")
    monkeypatch.setattr(execution, "notebooks_dir", lambda: clone / "notebooks")
    cwd = clone if where == "clone root" else tmp_path / "elsewhere" / "deeper"
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    before = _files(tmp_path, micro_cache)
    moves: list[str] = []
    chdir = os.chdir
    monkeypatch.setattr(os, "chdir", lambda path: (moves.append(str(path)), chdir(path))[1])
    argv = ["report", "-c", "prose", "humaneval", "-o", "reports/", *WHERE[where]]
    settings = ["--max-tokens", str(MAX_TOKENS), "--cache-dir", str(micro_cache), "-p", "n_boot", "10"]
    status = cli.main([*argv, *settings])
    assert Path.cwd() == cwd and moves == []
    out = cwd / "reports"
    table = json.loads((out / "results.json").read_text())
    assert status == 0, (out / "index.html").read_text()[-3000:]
    ran = len(WHERE[where][1:]) or len(execution.list_notebooks())
    assert (out / "index.html").is_file() and len(table["headlines"]) == ran, sorted(table["headlines"])
    written = _files(tmp_path, micro_cache) - before
    assert written and all(out in p.parents for p in written), sorted(
        str(p) for p in written if out not in p.parents
    )


@pytest.mark.slow  # the session's report executes every notebook
def test_index_and_results_state_the_grid_the_notebooks_analysed(
    micro_prose_report_template: Path, tmp_path: Path
) -> None:
    """A grid on prose only: the index and results.json state prose only, as the notebooks
    analysed; results.json keys every entry behind a headline, the training notebook's
    checkpoints included (each found among the cache's entries on prose, independently listed)."""
    from rbplab.store.cache.admin import list_entries

    out = micro_prose_report_template
    # The report's cache, copied: listing may write an index into the cache it reads.
    cache = copy_cache(out.parent / "cache", tmp_path / "cache")
    results = json.loads((out / "results.json").read_text())
    assert results["grid"]["corpora"] == ["prose"]
    index = (out / "index.html").read_text()
    assert "<dt>corpora</dt><dd>prose</dd>" in index and "humaneval" not in index
    analysed = pd.read_csv(out / "01_rbp_vs_size" / "runs.csv")
    assert sorted(analysed["corpus"].unique()) == ["prose"]
    runs = pd.DataFrame(results["runs"]["rows"], columns=results["runs"]["columns"])
    entries = list_entries(cache)
    on_prose = set(entries.loc[entries["corpus"] == "prose", "key"])
    assert runs["cache_key"].notna().all(), runs[runs["cache_key"].isna()]
    # 6 final models + 3 checkpoints of each, the final checkpoint being the final model's entry
    assert set(runs["cache_key"]) == on_prose and len(on_prose) == 6 * 3


# ---------------------------------------------------------------------------------------------
# No notebook and no command runs a model unless asked.

GUARD = """
import os, pathlib
_marker = pathlib.Path(os.environ["RBPLAB_MODEL_GUARD"])


def _refuse(*args, **kwargs):
    _marker.write_text("model weights were loaded")
    raise RuntimeError("a model ran without being asked to (extract=True)")


import transformers
from rbplab.extraction import weights

transformers.AutoModelForCausalLM.from_pretrained = _refuse
transformers.PreTrainedModel.from_pretrained = _refuse
weights.load_weights = _refuse
"""


@pytest.mark.slow  # executes every notebook
def test_no_notebook_or_command_runs_a_model_on_an_empty_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Every notebook (papermill, its defaults but one corpus) and `rbplab fit` / `rbplab report`
    on an empty cache: no model's weights are loaded (a sitecustomize in every kernel makes
    loading them raise and leave a mark); the notebooks that need runs fail naming them."""
    if not micro_present():
        pytest.skip("the micro-suite's weights are not in data/")
    from rbplab.cli import app as cli
    from rbplab.extraction import pipeline

    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    marker = tmp_path / "loaded"
    monkeypatch.setenv("RBPLAB_MODEL_GUARD", str(marker))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(guard), os.environ.get("PYTHONPATH")]))
    )
    cache = tmp_path / "cache"
    params = {"families": ["micro"], "corpora": ["prose"], "cache_dir": str(cache), "n_boot": 5}
    for path in execution.list_notebooks():
        result = execution.execute_notebook(path, tmp_path / "out", params, html_export=False)
        assert not marker.exists(), f"{path.stem} loaded a model"
        if path.stem != "06_training_dynamics":  # 06 falls back to a synthetic law, and says so
            assert not result.ok and "MissingRunsError" in (result.error or ""), (path.stem, result.error)
    assert not list(cache.rglob("shard-*")) if cache.exists() else True

    def refuse(*args, **kwargs):
        raise AssertionError("a model ran without being asked to")

    monkeypatch.setattr(pipeline, "load_weights", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)
    for argv in (["fit", "-c", "prose"], ["report", "-c", "prose", "-o", str(tmp_path / "r")]):
        status = cli.main([*argv, "--cache-dir", str(cache)])
        out, err = capsys.readouterr()
        assert status == 1 and err.count("\n") == 1, err
        assert "6 run(s) are not in the cache" in err and f"rbplab {' '.join(argv)} --cache-dir" in err
        assert err.rstrip().endswith("--extract"), err
    assert not (tmp_path / "r").exists()  # refused before any notebook ran
