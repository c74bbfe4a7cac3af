"""A report folder holds one report: a report written over another removes the files the other
wrote (listed in its manifest), and never a file no report wrote."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from rbplab.grid import Grid
from rbplab.report import ReportOptions, run_report
from rbplab.report.folder import MANIFEST, one_report, previous_files


def _notebook(path: Path) -> Path:
    """A notebook saving one table per name in its `tables` parameter, as 01 saves fits.csv and
    07 per_model.csv."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    param = nbformat.v4.new_code_cell("families = ['x']\noutput_dir = None\ntables = ['fits']")
    param.metadata["tags"] = ["parameters"]
    save = (
        "import pandas as pd\nfrom rbplab import report\n"
        "for name in tables:\n"
        "    report.save_table(pd.DataFrame({'corpus': families}), name, output_dir)"
    )
    nb.cells = [param, nbformat.v4.new_code_cell(save)]
    nbformat.write(nb, path)
    return path


def _report(src: Path, out: Path, tables: list[str]) -> None:
    table = run_report(
        Grid.from_names("micro", max_tokens=100),
        out,
        parameters={"tables": tables},
        options=ReportOptions(source_dir=src, html_export=False),
        progress=None,
    )
    assert table["ok"].all(), table["error"].tolist()


@pytest.mark.notebook
def test_a_report_over_another_keeps_only_its_own_files_and_the_users(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _notebook(src / "a_tables.ipynb")
    out = tmp_path / "reports"
    _report(src, out, ["fits", "per_model"])
    assert (out / "a_tables" / "per_model.csv").is_file()
    first = previous_files(out)
    assert {"a_tables/fits.csv", "a_tables/per_model.csv", "index.html", "results.json"} <= set(first)
    # The user's own files, beside the report and inside a notebook's folder: no report wrote them.
    (out / "notes.txt").write_text("mine")
    (out / "a_tables" / "by_hand.csv").write_text("x\n1\n")
    (out / "old").mkdir()
    (out / "old" / "draft.md").write_text("mine too")

    _report(src, out, ["fits"])
    assert not (out / "a_tables" / "per_model.csv").exists()  # the old report's table is gone
    assert (out / "a_tables" / "fits.csv").is_file()
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "a_tables" / "by_hand.csv").read_text() == "x\n1\n"
    assert (out / "old" / "draft.md").read_text() == "mine too"
    second = previous_files(out)
    assert "a_tables/per_model.csv" not in second and "a_tables/fits.csv" in second
    assert not {"notes.txt", "a_tables/by_hand.csv", "old/draft.md", MANIFEST} & set(second)
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == set(second) | {"notes.txt", "a_tables/by_hand.csv", "old/draft.md", MANIFEST}


def test_a_report_stopped_midway_still_lists_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    (out / "kept").mkdir(parents=True)
    (out / "kept" / "mine.txt").write_text("mine")
    with pytest.raises(KeyboardInterrupt), one_report(out):
        (out / "01").mkdir()
        (out / "01" / "fits.csv").write_text("half")
        raise KeyboardInterrupt
    assert json.loads((out / MANIFEST).read_text())["files"] == ["01/fits.csv"]
    with one_report(out):  # the next report removes the half-written one, folder and all
        assert not (out / "01").exists() and (out / "kept" / "mine.txt").is_file()
    assert previous_files(out) == []


def test_a_manifest_naming_paths_outside_the_folder_removes_nothing_there(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    outside = tmp_path / "precious.txt"
    outside.write_text("keep")
    (out / MANIFEST).write_text(json.dumps({"files": ["../precious.txt", str(outside)]}))
    with one_report(out):
        pass
    assert outside.read_text() == "keep"
