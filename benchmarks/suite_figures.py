"""The test suite's figures on record: its wall time, its result line and its 25 slowest tests, from a
fresh clone's `make test` (what CI runs, `.ci/run`) or from the output of a pytest run already made,
written to `benchmarks/results/suite_figures-<date>-<commit>.txt` so that the next change can be set
beside it.

    .venv/bin/python benchmarks/suite_figures.py                  # clone HEAD, run .ci/run there, record
    .venv/bin/python benchmarks/suite_figures.py --log make.log   # record a log already written
    .venv/bin/python benchmarks/suite_figures.py --log make.log --print   # print only

A log is pytest's terminal output run with `--durations` (`make test` passes `--durations=0
--durations-min=1`: every phase of a second or more): the durations block and the final "N passed
... in S s" line are what is read; anything else (ruff, lint-imports, xdist's worker lines,
warnings) is passed over. The figures: the 25 slowest phases, and the seconds of each module over
the phases listed (setup, call and teardown together), slowest first, which is the order
tests/conftest.py's SLOWEST sends modules out in. In the clone mode the whole command is timed too
(wall, and the CPU of every process it started), set beside the suite's target (`TARGET_S`), and its
output is kept beside the figures (`.log`). Exit status: the command's (1 when a log holds no
result line).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SLOWEST = 25
MODULES = 15  # modules listed by their summed seconds
TARGET_S = 600.0  # `make test` on a fresh clone of the 2-core machine, install included
COMMAND = "bash .ci/run"

# "24.60s call     tests/cli/test_bounded_files.py::test_x[index sparse 2 GiB]"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")
_DURATIONS_HEADER = re.compile(r"slowest (\d+ )?durations")
# "1702 passed, 3 skipped, 2 warnings in 694.12s (0:11:34)", bare or between "=" rules.
_RESULT = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in (\d+(?:\.\d+)?)s(?: \([\d:]+\))?\s*=*\s*$")


@dataclass
class Figures:
    """What a pytest log says: the result line's counts, pytest's own session time, and the
    slowest test phases as it listed them (seconds, phase, test id), slowest first."""

    counts: dict[str, int] = field(default_factory=dict)
    seconds: float | None = None
    slowest: list[tuple[float, str, str]] = field(default_factory=list)


def parse_log(text: str) -> Figures:
    """The figures of a pytest log (the last result line and the last durations block, so a log
    of several runs gives the last run's)."""
    figures = Figures()
    block: list[tuple[float, str, str]] | None = None
    for line in text.splitlines():
        line = _ANSI.sub("", line)
        if _DURATIONS_HEADER.search(line) and line.lstrip().startswith("="):
            block = []
            continue
        if block is not None:
            found = _DURATION.match(line)
            if found:
                block.append((float(found[1]), found[2], found[3]))
                continue
            if block or line.strip().startswith("="):  # the block ended (or was empty)
                figures.slowest, block = block, None
        result = _RESULT.match(line.strip())
        if result:
            counts = {}
            for part in result[1].split(", "):
                number, word = part.split(" ", 1)
                counts[word] = int(number)
            figures.counts, figures.seconds = counts, float(result[2])
    if block:
        figures.slowest = block
    figures.slowest.sort(key=lambda row: -row[0])
    return figures


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # pytest colours its output on a terminal


@dataclass
class Run:
    """The whole command as it ran: wall seconds, CPU seconds of its processes, exit status."""

    command: str
    wall: float
    user: float
    system: float
    status: int


def run_in_clone(source: Path, commit: str, command: str, log: Path) -> Run:
    """Clone `source` at `commit` into a temporary folder (nothing of this checkout's working
    tree, caches or virtualenv comes along) and run `command` there, its output copied to
    stdout and to `log`."""
    with tempfile.TemporaryDirectory(prefix="suite-figures-") as work:
        clone = Path(work) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-local", str(source), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        with open(log, "w", encoding="utf-8") as out:
            process = subprocess.Popen(
                shlex.split(command), cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                out.write(line)
            status = process.wait()
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Run(command, wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, status)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


def render(figures: Figures, *, source: str, commit: str, date: str, run: Run | None = None) -> str:
    """The figures as the results file holds them (fixed columns, so two files compare line by line)."""
    machine = f"{os.cpu_count()} CPUs"
    lines = [
        f"# The test suite's figures, {date}, commit {commit}, {machine}: {source}",
        "",
        "result    " + (", ".join(f"{n} {word}" for word, n in figures.counts.items()) or "none found"),
        "pytest    " + (f"{figures.seconds:.1f} s ({_minutes(figures.seconds)})" if figures.seconds else "-"),
    ]
    if run is not None:
        lines.append(
            f"command   {run.wall:.1f} s ({_minutes(run.wall)}) wall, {_minutes(run.user)} user, "
            f"{_minutes(run.system)} sys, exit {run.status}: {run.command}"
        )
        margin = TARGET_S - run.wall
        verdict = f"met, {margin:.1f} s to spare" if margin >= 0 else f"missed by {-margin:.1f} s"
        lines.append(f"target    {TARGET_S:.0f} s ({_minutes(TARGET_S)}) wall: {verdict}")
    shown = figures.slowest[:SLOWEST]
    lines += ["", f"{len(shown)} slowest (pytest --durations: setup, call and teardown apart)", ""]
    lines += ["  seconds  phase     test"]
    lines += [f"{seconds:9.2f}  {phase:<8}  {test}" for seconds, phase, test in shown]
    if shown:
        # Under xdist the workers' times add up past the wall time: a sum, not a share of it.
        lines += ["", f"these {len(shown)} together: {sum(s for s, _, _ in shown):.1f} s"]
    modules = by_module(figures.slowest)[:MODULES]
    if modules:
        lines += ["", f"{len(modules)} slowest modules (the phases listed, summed)", ""]
        lines += [f"{seconds:9.2f}  {module}" for module, seconds in modules]
    return "\n".join(lines) + "\n"


def by_module(slowest: list[tuple[float, str, str]]) -> list[tuple[str, float]]:
    """(module, seconds) of the phases listed, summed per test module, slowest first."""
    totals: dict[str, float] = {}
    for seconds, _, test in slowest:
        module = test.split("::")[0]
        totals[module] = totals.get(module, 0.0) + seconds
    return sorted(totals.items(), key=lambda row: -row[1])


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="a pytest log to read instead of running the suite")
    parser.add_argument(
        "--command", default=COMMAND, help=f"what runs the suite in the clone (default {COMMAND!r})"
    )
    parser.add_argument("--commit", default="HEAD", help="the commit to clone and run (default HEAD)")
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="the repository to clone (default this one)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the results file")
    parser.add_argument("--print", action="store_true", help="print the figures, write nothing")
    args = parser.parse_args(argv)

    date = datetime.date.today().isoformat()
    if args.log is not None:
        commit = _git("rev-parse", "--short", "HEAD") if args.source == ROOT else "-"
        text = args.log.read_text(encoding="utf-8", errors="replace")
        run, source = None, f"read from {args.log.name}"
    else:
        commit = subprocess.run(
            ["git", "-C", str(args.source), "rev-parse", "--short", args.commit],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        args.results.mkdir(parents=True, exist_ok=True)
        log = args.results / f"suite_figures-{date}-{commit}.log"
        run = run_in_clone(args.source, commit, args.command, log)
        text = log.read_text(encoding="utf-8", errors="replace")
        source = f"a fresh clone, `{args.command}` (its output: {log.name})"
    figures = parse_log(text)
    report = render(figures, source=source, commit=commit, date=date, run=run)
    if args.print:
        print(report, end="")
    else:
        args.results.mkdir(parents=True, exist_ok=True)
        path = args.results / f"suite_figures-{date}-{commit}.txt"
        path.write_text(report, encoding="utf-8")
        print(f"wrote {path}")
    status = run.status if run is not None else 0
    if not figures.counts:
        print("no pytest result line found", file=sys.stderr)
        return status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
