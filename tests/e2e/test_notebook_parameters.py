"""Notebook parameters through papermill's own command line, on every notebook: `-p` types only
True, False, None and numbers, so a flag or a number given as other text reaches the kernel as
text. Each notebook types them in the cell right after its parameters cell, or stops there with a
one-line `ParameterError` naming the parameter, its value and the type expected (the kernel shows
that line alone, no frames); `-p extract false` and `-p synthetic false` are false."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rbplab.store.paths import notebooks_dir

pytestmark = [pytest.mark.slow, pytest.mark.notebook]  # each case starts a kernel (papermill)

# notebook -> a parameter it declares, a value papermill hands over as text, and the error
REFUSED = {
    "01_rbp_vs_size": ("n_boot", "abc", "parameter 'n_boot' is 'abc', not an int (a whole number)"),
    "02_k_sweep": ("n_boot", "abc", "parameter 'n_boot' is 'abc', not an int (a whole number)"),
    "03_emergence": ("extrapolate", "maybe", "parameter 'extrapolate' is 'maybe', not a bool"),
    "04_lognormal": ("n_boot", "ten", "parameter 'n_boot' is 'ten', not an int (a whole number)"),
    "05_extraction": ("progress", "sometimes", "parameter 'progress' is 'sometimes', not a bool"),
    "06_training_dynamics": ("synthetic", "perhaps", "parameter 'synthetic' is 'perhaps', not a bool"),
    "07_beyond_the_paper": ("extract", "nope", "parameter 'extract' is 'nope', not a bool"),
}


def papermill(notebook: str, tmp_path: Path, *parameters: str) -> tuple[int, str, list[dict]]:
    """(exit status, output, executed cells) of `papermill NOTEBOOK OUT -p NAME VALUE ...`."""
    out = tmp_path / "out.ipynb"
    argv = [sys.executable, "-m", "papermill", str(notebooks_dir() / f"{notebook}.ipynb"), str(out)]
    for name, value in zip(parameters[::2], parameters[1::2], strict=True):
        argv += ["-p", name, value]
    done = subprocess.run(
        [*argv, "--cwd", str(tmp_path), "--no-progress-bar"], capture_output=True, text=True, timeout=600
    )
    cells = json.loads(out.read_text())["cells"] if out.exists() else []
    return done.returncode, done.stdout + done.stderr, cells


def _failed_cell(cells: list[dict]) -> dict:
    return next(c for c in cells if any(o.get("output_type") == "error" for o in c.get("outputs", [])))


def test_every_notebook_is_covered():
    assert sorted(REFUSED) == sorted(p.stem for p in notebooks_dir().glob("0*.ipynb"))


@pytest.mark.parametrize("notebook", sorted(REFUSED))
def test_a_parameter_of_another_type_stops_the_notebook_in_one_line(notebook, tmp_path):
    name, value, message = REFUSED[notebook]
    status, output, cells = papermill(notebook, tmp_path, name, value, "cache_dir", str(tmp_path / "cache"))
    assert status != 0
    assert f"ParameterError: {message}" in output, output[-3000:]
    failed = _failed_cell(cells)
    assert "typed_parameters(globals())" in "".join(failed["source"])
    (error,) = [o for o in failed["outputs"] if o.get("output_type") == "error"]
    assert error["ename"] == "ParameterError" and error["evalue"].startswith(message)
    # the kernel shows the message alone (ParameterError._render_traceback_), not ~17 lines of
    # frames; what papermill prints around it is its own traceback
    assert error["traceback"] == [f"ParameterError: {error['evalue']}"]
    kernel_part = output.split('Exception encountered at "In [', 1)[1].splitlines()[1:]
    assert [line for line in kernel_part if line.strip()] == error["traceback"], output[-3000:]


def test_extract_false_is_false(tmp_path):
    """On an empty cache, `-p extract false` names the missing runs and computes none."""
    cache = tmp_path / "cache"
    status, output, _ = papermill(
        "01_rbp_vs_size", tmp_path, "extract", "false", "cache_dir", str(cache),
        "corpora", '["prose"]', "settings", "{max_tokens: 64}",
    )  # fmt: skip
    assert status != 0 and "MissingRunsError" in output and "not in the cache" in output, output[-3000:]
    assert not [p for p in cache.rglob("*.parquet")]


def test_synthetic_false_is_false(tmp_path):
    """`-p synthetic false` reads the cache (here empty: the runs are named), not made-up models."""
    cache = tmp_path / "cache"
    status, output, _ = papermill(
        "02_k_sweep", tmp_path, "synthetic", "false", "cache_dir", str(cache), "corpora", '["prose"]'
    )
    assert status != 0 and "MissingRunsError" in output and "not in the cache" in output, output[-3000:]
