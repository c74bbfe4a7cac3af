"""benchmarks/suite_figures.py: the suite's figures read from a pytest log (a log as `make test`
writes it, and one written here by a real pytest run of a few sleeping tests), and the whole
clone-and-run mode on a small repository of its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "suite_figures.py"


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("suite_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["suite_figures"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["suite_figures"]


# The shape of `make test`'s output: lint lines, xdist's, warnings, the durations block, the result.
MAKE_TEST_LOG = """\
.venv/bin/ruff check rbplab tests benchmarks scripts notebooks
All checks passed!
.venv/bin/lint-imports
Contracts: 9 kept, 0 broken.
RBPLAB_DOCS_SITE=site .venv/bin/pytest -q -n auto --maxprocesses 4 --dist loadscope --durations=25
created: 2/2 workers
2 workers [1702 items]
........................................................................ [ 99%]
.......                                                                  [100%]
=============================== warnings summary ===============================
tests/x.py::test_y
  UserWarning: 3 passed in 1.00s (a message that looks like a result)
============================= slowest 25 durations =============================
215.31s call     tests/e2e/test_explorer_axes.py::test_explorer_axes
98.02s setup    tests/e2e/test_study_report.py::test_index[a b]
12.50s teardown tests/runner/test_ray.py::test_cluster
0.51s call     tests/viz/test_states.py::test_fit
(1698 durations < 0.005s hidden.  Use -vv to show these durations.)
1702 passed, 2 warnings in 694.12s (0:11:34)
"""


def test_a_make_test_log_is_read(figures):
    read = figures.parse_log(MAKE_TEST_LOG)
    assert read.counts == {"passed": 1702, "warnings": 2} and read.seconds == 694.12
    assert read.slowest == [
        (215.31, "call", "tests/e2e/test_explorer_axes.py::test_explorer_axes"),
        (98.02, "setup", "tests/e2e/test_study_report.py::test_index[a b]"),
        (12.50, "teardown", "tests/runner/test_ray.py::test_cluster"),
        (0.51, "call", "tests/viz/test_states.py::test_fit"),
    ]
    text = figures.render(read, source="read from make.log", commit="abc1234", date="2026-12-02")
    assert "result    1702 passed, 2 warnings" in text and "pytest    694.1 s (11m34.1s)" in text
    assert "   215.31  call      tests/e2e/test_explorer_axes.py::test_explorer_axes" in text
    assert "these 4 together: 326.3 s" in text


def test_each_module_sums_its_phases_slowest_first(figures):
    rows = [(5.0, "setup", "tests/a.py::t[x]"), (1.5, "call", "tests/b.py::t")]
    rows.append((4.0, "call", "tests/a.py::u"))
    assert figures.by_module(rows) == [("tests/a.py", 9.0), ("tests/b.py", 1.5)]
    text = figures.render(figures.parse_log(MAKE_TEST_LOG), source="s", commit="c", date="d")
    block = text.split("slowest modules (the phases listed, summed)\n\n", 1)[1].splitlines()
    assert block == [
        "   215.31  tests/e2e/test_explorer_axes.py",
        "    98.02  tests/e2e/test_study_report.py",
        "    12.50  tests/runner/test_ray.py",
        "     0.51  tests/viz/test_states.py",
    ]


def test_a_timed_run_is_set_beside_the_target(figures):
    read = figures.parse_log(MAKE_TEST_LOG)
    # the limit, one under and one over
    verdicts = {599.0: "met, 1.0 s to spare", 600.0: "met, 0.0 s to spare", 601.5: "missed by 1.5 s"}
    for wall, verdict in verdicts.items():
        run = figures.Run("bash .ci/run", wall, 900.0, 60.0, 0)
        text = figures.render(read, source="s", commit="c", date="d", run=run)
        assert f"target    600 s (10m00.0s) wall: {verdict}" in text, text


def test_the_25_slowest_are_kept_of_a_longer_list(figures):
    rows = "".join(f"{n}.00s call     tests/t.py::test_{n}\n" for n in range(1, 41))
    log = "=== slowest 40 durations ===\n" + rows + "=== 1 failed, 39 passed in 100.00s ===\n"
    read = figures.parse_log(log)
    assert read.counts == {"failed": 1, "passed": 39} and read.seconds == 100.0
    text = figures.render(read, source="s", commit="c", date="d")
    listed = [line for line in text.splitlines() if "tests/t.py::" in line]
    assert [line.split()[-1] for line in listed] == [f"tests/t.py::test_{n}" for n in range(40, 15, -1)]


def test_a_log_without_a_result_is_said_and_exits_1(figures, tmp_path, capsys):
    log = tmp_path / "broken.log"
    log.write_text("ruff: 3 errors\nmake: *** [test] Error 1\n")
    assert figures.main(["--log", str(log), "--print"]) == 1
    out, err = capsys.readouterr()
    assert "result    none found" in out and "no pytest result line found" in err


SUITE = """\
import time

import pytest


@pytest.mark.parametrize("seconds", [0.3, 0.1])
def test_sleeps(seconds):
    time.sleep(seconds)


def test_fails():
    assert False
"""


def test_a_real_pytest_log_is_read(figures, tmp_path):
    (tmp_path / "test_small.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--durations=2", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["-c", "/dev/null", "--rootdir", str(tmp_path), "test_small.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    read = figures.parse_log(done.stdout)
    assert read.counts == {"failed": 1, "passed": 2}, done.stdout
    assert [(phase, test) for _, phase, test in read.slowest] == [
        ("call", "test_small.py::test_sleeps[0.3]"),
        ("call", "test_small.py::test_sleeps[0.1]"),
    ]
    assert read.slowest[0][0] >= 0.3 and read.slowest[1][0] >= 0.1
    assert read.seconds >= 0.4


def test_a_fresh_clone_is_run_and_recorded(figures, tmp_path):
    """The clone mode on a repository of one test file: cloned (the working tree's later changes
    do not come along), run, timed, its output and figures written under --results."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_small.py").write_text(SUITE.replace("assert False", "assert True"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "--quiet", str(repo)], check=True)
    subprocess.run([*git, "add", "test_small.py"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "one"], check=True)
    (repo / "test_small.py").write_text("def test_uncommitted():\n    assert False\n")  # not cloned
    command = f"{sys.executable} -m pytest -q --durations=25 -p no:cacheprovider -p no:xdist -c /dev/null"
    results = tmp_path / "results"
    status = figures.main(["--source", str(repo), "--command", command, "--results", str(results)])
    assert status == 0
    (written,) = results.glob("suite_figures-*.txt")
    (log,) = results.glob("suite_figures-*.log")
    assert written.stem == log.stem
    text = written.read_text()
    assert "result    3 passed" in text and "exit 0" in text and "command   " in text
    assert "test_small.py::test_sleeps[0.3]" in text and "test_uncommitted" not in log.read_text()
