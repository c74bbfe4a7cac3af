"""Guards of the scorer and of the shard loop's pipelined writes, each held by a test of its own:
the user's batch_tokens sizes the batches; a write that failed stops the loop before another shard
is scored; a shard's claim is released once, after its write has landed; a failed write is raised.
The loop runs over a stand-in entry that records what happens, so each guard is seen directly."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from rbplab.extraction import scoring
from rbplab.extraction.exact import Tally
from rbplab.extraction.scoring import shard_frame
from rbplab.extraction.windows import Window


def _window(doc: int = 0, length: int = 64) -> Window:
    return Window(doc, np.arange(length, dtype=np.int64), 1, 0, np.ones(length - 1, dtype=bool))


class _CountingScorer:
    """Scores nothing: records how many windows each batch holds."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def score_layers(self, length: int, group: list[Window], layers) -> dict:
        self.sizes.append(len(group))
        n = sum(w.n_scored for w in group)
        stats = torch.zeros(n, dtype=torch.int64), torch.ones(n, dtype=torch.int64), torch.zeros(n)
        return {layer: (stats, 0) for layer in layers}


def test_the_scorer_batches_by_the_users_batch_tokens():
    plan = SimpleNamespace(
        policy=SimpleNamespace(context_length=64),
        corpus=SimpleNamespace(documents=[SimpleNamespace(id="d")]),
        layer=None,
    )
    scorer = _CountingScorer()
    frame = shard_frame(plan, scorer, [_window() for _ in range(8)], 128, lambda _n: None)
    # 64-token windows run at 64 padded tokens: 128 hold two of them (the CPU default, 2,048, all 8)
    assert scorer.sizes == [2, 2, 2, 2]
    assert len(frame) == 8 * 63


class _Entry:
    """What `compute_shards` asks of an entry, recording claims, releases and landed writes."""

    def __init__(self, fail: int | None = None, write_seconds: float = 0.0, hold_claim: int | None = None):
        self.events: list[tuple[str, int]] = []
        self.fail, self.write_seconds, self.hold_claim = fail, write_seconds, hold_claim
        self.failed = threading.Event()

    def has_shard(self, index: int) -> bool:
        return False

    @contextlib.contextmanager
    def shard_claim(self, index: int, wait: bool):
        if index == self.hold_claim:  # the failed write of the shard before has surely ended
            assert self.failed.wait(10)
            time.sleep(0.3)
        self.events.append(("claim", index))
        try:
            yield True
        finally:
            self.events.append(("release", index))

    @contextlib.contextmanager
    def lock(self):
        yield self

    def write_shard(self, index: int, frame: pd.DataFrame, provenance: dict | None = None) -> None:
        time.sleep(self.write_seconds)
        if index == self.fail:
            self.failed.set()
            raise OSError(28, "No space left on device")
        self.events.append(("written", index))

    def is_complete(self) -> bool:
        return True  # nothing to finalise here


@pytest.fixture
def loop(monkeypatch):
    """run(entry, n) runs the shard loop over n shards of `entry`; returns the shards scored."""
    scored: list[int] = []

    def run(entry: _Entry, n: int) -> list[int]:
        shards = [[_window(i)] for i in range(n)]

        def frames(plan, scorer, windows, batch_tokens, report, layers):
            scored.append(next(i for i, shard in enumerate(shards) if shard is windows))
            return {layer: (pd.DataFrame({"doc_index": [0]}), 0) for layer in layers}

        monkeypatch.setattr(scoring, "layer_frames", frames)
        plan = SimpleNamespace(
            layer=None,
            shards=shards,
            settings=SimpleNamespace(batch_tokens=None),
            described=SimpleNamespace(weights=None),  # no weight files to re-check between shards
        )
        scorer = SimpleNamespace(head=SimpleNamespace(name="fp32", tally=Tally()))  # no model: no rows
        scoring.compute_shards([(plan, entry)], range(n), get_scorer=lambda _plan: scorer)
        return scored

    run.scored = scored
    return run


def test_a_failed_write_stops_the_loop_before_the_next_shard_is_scored(loop):
    entry = _Entry(fail=0, hold_claim=1)
    with pytest.raises(OSError, match="No space left"):
        loop(entry, 3)
    assert loop.scored == [0]


def test_a_claim_is_released_once_and_only_after_its_write_landed(loop):
    entry = _Entry(write_seconds=0.2)
    assert loop(entry, 3) == [0, 1, 2]
    for index in range(3):
        assert entry.events.count(("release", index)) == 1, entry.events
        assert entry.events.index(("written", index)) < entry.events.index(("release", index)), entry.events


def test_the_last_write_is_waited_for_and_its_failure_raised(loop):
    entry = _Entry(fail=2, write_seconds=0.1)
    with pytest.raises(OSError, match="No space left"):
        loop(entry, 3)
    assert ("written", 1) in entry.events and entry.events.count(("release", 2)) == 1
