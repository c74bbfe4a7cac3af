"""The plan's throughput probe, held where it can go wrong: it draws the windows of the first
`--probe-tokens` targets (the window that reaches the count is the last, one token more takes the
next), times its batches in a shuffled order (sorted by length, a short probe would time only the
shortest windows), and reports targets (not windows, not batches) per second.

The scorer is a stand-in that scores nothing and moves a clock by a fixed step per batch, so the
rate the probe reports can be computed here from what it was handed."""

from __future__ import annotations

import itertools
import json
import time
from types import SimpleNamespace

import pytest
import torch

from rbplab.cli.app import main
from rbplab.extraction.plan import plan_extraction, plan_windows
from rbplab.extraction.scoring import batches
from rbplab.runner import probe as probing

STEP = 0.5  # seconds the stand-in clock moves per scored batch
# HumanEval's documents are short and of many lengths: its windows make batches of 64 to 256
# padded tokens, so the order the probe times them in shows.
SETTINGS = {"max_tokens": 3000, "context_length": 256, "batch_tokens": 512}


@pytest.fixture(scope="module")
def plan():
    return plan_extraction("micro-1-25K", "humaneval", **SETTINGS)


@pytest.fixture(scope="module")
def scored_counts(plan) -> list[int]:
    return [w.n_scored for w in plan_windows(plan)]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Scorer:
    """Scores nothing; records each batch it is handed and moves the clock by STEP."""

    device = torch.device("cpu")

    def __init__(self, clock: _Clock) -> None:
        self.clock, self.calls = clock, []

    def score(self, length, group):
        self.calls.append((length, tuple(group)))
        self.clock.now += STEP


@pytest.fixture
def probe(monkeypatch):
    """probe(plan, tokens, seconds) -> (throughput, batches scored in order, windows drawn)."""
    clock = _Clock()
    scorer = _Scorer(clock)
    drawn: list = []
    real_batches = probing.batches

    def batches(windows, *args):
        drawn.extend(windows)
        return real_batches(windows, *args)

    monkeypatch.setattr(probing, "load_scorer", lambda plan: scorer)
    monkeypatch.setattr(probing, "batches", batches)
    clock_only = SimpleNamespace(perf_counter=clock, time=time.time, monotonic=time.monotonic)
    monkeypatch.setattr(probing, "time", clock_only)

    def run(plan, tokens, seconds):
        rate = probing.probe_throughput(plan, tokens, seconds)
        return rate, scorer.calls, drawn

    run.scorer, run.drawn = scorer, drawn
    return run


def _windows_for(counts: list[int], tokens: int) -> int:
    """How many leading windows hold `tokens` targets: the least whose running sum reaches it."""
    return next(i + 1 for i, total in enumerate(itertools.accumulate(counts)) if total >= tokens)


def test_the_windows_for_a_count_are_found_by_hand(scored_counts):
    # The table below leans on the first windows' counts: 216, 255 and 13 targets.
    assert scored_counts[:3] == [216, 255, 13] and len(scored_counts) == 21
    assert [_windows_for(scored_counts, t) for t in (1, 216, 217, 471, 472)] == [1, 1, 2, 2, 3]


@pytest.mark.parametrize(
    ("tokens", "windows"),
    [(1, 1), (215, 1), (216, 1), (217, 2), (470, 2), (471, 2), (472, 3), (10**6, 21), (None, 21)],
)
def test_the_probe_draws_the_windows_of_its_first_tokens(plan, probe, scored_counts, tokens, windows):
    """216 + 255 = 471 targets fill the first two windows: 471 draws two, 472 three; None, one
    shard (65,536 targets), the whole corpus here."""
    rate, calls, drawn = probe(plan, tokens, 0)
    assert [w.n_scored for w in drawn] == scored_counts[:windows]
    assert {id(w) for _, group in calls for w in group} <= {id(w) for w in drawn}


def test_the_rate_is_targets_per_second_over_the_timed_batches(plan, probe):
    rate, calls, drawn = probe(plan, None, 4 * STEP)
    # One untimed batch first, then batches until 4 steps of the clock have gone by.
    timed = calls[1:]
    assert len(timed) == 4 and calls[0] == calls[1]
    targets = sum(w.n_scored for _, group in timed for w in group)
    windows = sum(len(group) for _, group in timed)
    assert rate.tokens == targets and rate.seconds == pytest.approx(4 * STEP)
    assert rate.tokens_per_second == pytest.approx(targets / (4 * STEP))
    assert targets > 10 * windows  # so a rate of windows (or batches) per second cannot pass


@pytest.mark.parametrize("seconds", [0, STEP, STEP * 1.5])
def test_the_probe_times_until_its_seconds_have_gone_by(plan, probe, seconds):
    rate, calls, _ = probe(plan, 1000, seconds)
    timed = max(1, int(-(-seconds // STEP)))  # at least one batch; then until `seconds` are reached
    assert len(calls) == 1 + timed and rate.seconds == pytest.approx(timed * STEP)


def _ids(batches) -> list[tuple]:
    """Batches as (padded length, the ids of their windows): windows hold arrays, not hashable."""
    return [(length, tuple(id(w) for w in group)) for length, group in batches]


def test_the_timed_batches_are_a_shuffled_sample_of_every_length(plan, probe):
    rate, calls, drawn = probe(plan, None, 100 * STEP)
    made = list(batches(list(drawn), SETTINGS["batch_tokens"], SETTINGS["context_length"]))
    timed = calls[1 : 1 + len(made)]  # one pass over every batch
    # Every batch of the sample, each once per pass ...
    assert sorted(_ids(timed)) == sorted(_ids(made))
    assert len({length for length, _ in made}) >= 3
    lengths = [length for length, _ in timed]
    # ... in an order other than by length, so a short probe already times long and short ones.
    assert lengths != sorted(lengths)
    first_half = lengths[: len(lengths) // 2]
    assert max(first_half) > min(lengths) and len(set(first_half)) >= 2
    # A fixed shuffle: the same probe times the same batches (estimates repeat).
    first = len(calls)
    probe(plan, None, 100 * STEP)
    assert _ids(probe.scorer.calls[first + 1 :][: len(made)]) == _ids(timed)


def test_probe_tokens_of_the_command_line_reach_the_probe(
    probe, tmp_path, scored_counts, capsys, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status = main(
        ["plan", "-m", "micro-1-25K", "-c", "humaneval", "--max-tokens", "3000", "--context-length", "256"]
        + ["--batch-tokens", "512", "--cache-dir", str(tmp_path / "cache"), "--probe-tokens", "472"]
        + ["--probe-seconds", str(2 * STEP), "--format", "json"]
    )
    assert status == 0
    assert [w.n_scored for w in probe.drawn] == scored_counts[:3]
    rate = json.loads(capsys.readouterr().out)["totals"]["throughput"]
    timed = probe.scorer.calls[1:]
    assert len(timed) == 2
    assert rate["tokens"] == sum(w.n_scored for _, group in timed for w in group)
