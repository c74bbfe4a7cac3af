"""`rbplab report` and `rbplab fit` arguments: --figures, --params, -p, --extract."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.cli import run

from rbplab.cli import app as cli


@pytest.fixture
def captured(monkeypatch):
    """run_report and load_study replaced by recorders: these tests check what the CLI hands them."""
    calls: dict = {}

    def fake_report(*args, **kwargs):
        calls["report"] = (args, kwargs)
        return pd.DataFrame({"ok": [True]})

    def fake_load(*args, **kwargs):
        calls["load_study"] = (args, kwargs)
        return object()  # a study only fake_fit_table reads

    def fake_fit_table(study, ks):
        return pd.DataFrame({"k": ks})

    monkeypatch.setattr("rbplab.report.run_report", fake_report)
    monkeypatch.setattr("rbplab.study.load_study", fake_load)
    monkeypatch.setattr("rbplab.study.size.fit_table", fake_fit_table)
    return calls


def test_report_hands_parameters_figures_and_extract_over(capsys, tmp_path, captured):
    params = tmp_path / "batch.yaml"
    params.write_text("corpora: [prose]\nks: [1, 10]\nn_boot: 50\n")
    status, _, err = run(
        capsys,
        "report",
        "-c",
        "prose",
        "-o",
        str(tmp_path / "out"),
        "--params",
        str(params),
        "-p",
        "ks",
        "[1, 5, 50]",
        "-p",
        "synthetic",
        "true",
        "--figures",
        "png, SVG",
        "--extract",
    )
    assert status == 0, err
    (grid, _), kwargs = captured["report"]
    assert kwargs["parameters"] == {"ks": [1, 5, 50], "n_boot": 50, "synthetic": True}
    assert grid.corpora == ("prose",) and grid.families == ["micro"]
    assert kwargs["options"].figures == ("png", "svg") and kwargs["extract"] is True


def test_report_params_naming_the_grid_build_it(capsys, tmp_path, captured):
    """--params / -p families, corpora, models and settings (as papermill takes them) are the grid's:
    they reach run_report inside its Grid, never as notebook parameters beside it."""
    from rbplab.catalog.registry import family_models

    members = family_models("micro")["model"].tolist()
    params = tmp_path / "batch.yaml"
    params.write_text(f"corpora: [humaneval]\nmodels: [{members[0]}]\nsettings: {{max_tokens: 300}}\n")
    argv = ["report", "-o", str(tmp_path / "out"), "--params", str(params), "-p", "extract", "true"]
    status, _, err = run(capsys, *argv, "-p", "cache_dir", str(tmp_path / "c"))
    assert status == 0, err
    (grid, _), kwargs = captured["report"]
    assert grid.corpora == ("humaneval",) and grid.models == members[:1]
    assert grid.settings.max_tokens == 300 and kwargs["parameters"] == {}
    assert kwargs["extract"] is True and kwargs["cache_dir"] == str(tmp_path / "c")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--figures", "png,gif"], "unknown figure format 'gif'"),
        (["--params", "missing.yaml"], "cannot read parameters file missing.yaml"),
        (["-p", "ks", "[1,"], "-p ks: cannot read '[1,' as a YAML value"),
        # The grid's names given through -p are checked as --corpus/--family are.
        (["-p", "corpora", "nosuchcorpus"], "unknown corpus 'nosuchcorpus'"),
        (["-p", "families", "[nofamily]"], "unknown model family 'nofamily'"),
    ],
)
def test_report_argument_errors_are_one_line(capsys, tmp_path, monkeypatch, captured, extra, message):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "report", "-o", str(tmp_path / "out"), *extra)
    assert status == 1 and out == "" and err.count("\n") == 1 and message in err
    assert "report" not in captured and not (tmp_path / "out").exists()


def test_fit_passes_extract(capsys, captured):
    status, out, _ = run(capsys, "fit", "-c", "prose", "--k", "1", "10", "--format", "csv")
    assert status == 0 and out.splitlines() == ["k", "1", "10"]
    assert captured["load_study"][1]["extract"] is False
    run(capsys, "fit", "-c", "prose", "--extract")
    assert captured["load_study"][1]["extract"] is True
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["fit"].format_help()
    assert "--extract" in help_text and "a missing run is an error" in help_text


def test_fit_and_report_take_models_as_extract_does(capsys, tmp_path, captured):
    """`rbplab fit -m micro-6-2.7M` was "unrecognized arguments": -m/--model names models as for
    extract, with or instead of --family (micro is the default only without -m)."""
    status, _, err = run(capsys, "fit", "-m", "micro-6-2.7M", "micro-1-25K", "-c", "prose")
    assert status == 0, err
    assert captured["load_study"][0][0].models == ["micro-6-2.7M", "micro-1-25K"]
    status, _, err = run(capsys, "fit", "-f", "micro", "-m", "EleutherAI/pythia-70m", "-c", "prose")
    assert status == 0, err
    assert len(captured["load_study"][0][0].models) == 7  # the family's six and the hub model
    status, _, err = run(capsys, "report", "--model", "micro-1-25K", "-c", "prose", "-o", str(tmp_path / "o"))
    assert status == 0, err
    assert captured["report"][0][0].models == ["micro-1-25K"]
    status, _, err = run(capsys, "fit", "-m", "micro-6-2.8M", "-c", "prose")
    assert status == 1 and err.count("\n") == 1 and "did you mean 'micro-6-2.7M'" in err


def test_notebook_is_taken_by_number(capsys, tmp_path, captured):
    status, _, err = run(capsys, "report", "-o", str(tmp_path / "out"), "--notebook", "01", "6")
    assert status == 0, err
    assert captured["report"][1]["options"].notebooks == ("01", "6")  # run_report resolves numbers
    from rbplab.report.execution import list_notebooks, select_notebooks

    chosen = select_notebooks(list_notebooks(), ["01", "6"])
    assert [p.stem for p in chosen] == ["01_rbp_vs_size", "06_training_dynamics"]


def test_missing_runs_give_the_exact_command_with_extract(capsys, tmp_path):
    """On an empty cache `rbplab fit` fails in one line naming the runs, the settings the nearest
    cached runs differ in, and the user's own command with --extract (not "extract=True")."""
    empty = tmp_path / "empty"
    status, out, err = run(capsys, "fit", "-c", "prose", "--cache-dir", str(empty))
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "6 run(s) are not in the cache" in err and "micro-1-25K on prose" in err
    assert "the cache holds no run of these models on these corpora" in err
    command = f"rbplab fit -c prose --cache-dir {empty} --extract"
    assert err.rstrip().endswith(f"compute them with --extract: {command}")
    assert "extract=True" not in err


def test_figure_size_reaches_the_export(capsys, tmp_path, captured):
    out = str(tmp_path / "r")
    status, _, err = run(
        capsys, "report", "-c", "prose", "-o", out, "--figures", "pdf", "--figure-size", "column"
    )
    assert status == 0, err
    assert captured["report"][1]["options"].figure_size == "column"
    status, _, _ = run(capsys, "report", "-c", "prose", "-o", out, "--figures", "pdf")
    assert captured["report"][1]["options"].figure_size == "full"  # paper figures, 7 in, by default
    with pytest.raises(SystemExit):
        run(capsys, "report", "-c", "prose", "-o", out, "--figure-size", "poster")


def test_a_synthetic_report_needs_no_cached_run(capsys, tmp_path, monkeypatch):
    """`rbplab report -p synthetic true` on an empty cache used to stop at "24 run(s) are not in
    the cache": made-up models read none. The extraction notebook (no synthetic mode) is left out,
    and refused in one line when asked for by name."""
    from rbplab.report import execution
    from rbplab.report import run as report_run

    ran: dict = {}

    def fake_execute(path, out, params, **kwargs):
        ran[path.stem] = params
        return execution.NotebookResult(path.stem, True, 0.0, None, None, "made-up")

    monkeypatch.setattr(report_run, "execute_notebook", fake_execute)
    empty = tmp_path / "cache"
    status, out, err = run(capsys, "report", "-p", "synthetic", "true", "-o", str(tmp_path / "r"),
                                     "--cache-dir", str(empty))  # fmt: skip
    assert status == 0, err
    assert sorted(ran) == ["01_rbp_vs_size", "02_k_sweep", "03_emergence", "04_lognormal",
                           "06_training_dynamics", "07_beyond_the_paper"]  # fmt: skip
    assert all(params["synthetic"] is True for params in ran.values())
    assert "05_extraction left out" in out
    status, out, err = run(capsys, "report", "-p", "synthetic", "true", "--notebook", "01", "05",
                           "-o", str(tmp_path / "r"), "--cache-dir", str(empty))  # fmt: skip
    assert status == 1 and err.count("\n") == 1 and "05_extraction has no synthetic mode" in err
