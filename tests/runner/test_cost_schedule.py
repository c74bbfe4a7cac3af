"""The planner's wall time, each guard by itself: jobs are scheduled longest first, and an entry's
shards are grouped into work units of `shards_per_unit` shards, each unit one job."""

from __future__ import annotations

import pytest
import torch

from rbplab.grid import Grid
from rbplab.runner.costs import estimate_costs, makespan


def test_makespan_schedules_the_longest_job_first():
    # Two workers: 2 | 1 + 1 ends at 2; in the order given (or shortest first) 1 | 1, then 2 after
    # one of them: 3.
    assert makespan([1, 1, 2], 2) == 2
    assert makespan([1, 2, 1, 3, 3], 2) == 5  # 3 + 2 | 3 + 1 + 1


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """plan(workers, shards_per_unit) -> (wall - planning, all seconds - planning) of micro-1-25K on
    prose, 3,000 tokens in shards of 500, at a given throughput (no probe, no load time)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    grid = Grid.from_names(["micro-1-25K"], ["prose"], max_tokens=3000, context_length=64, shard_tokens=500)

    def plan(workers: int, shards_per_unit: int) -> tuple[float, float]:
        totals = estimate_costs(
            grid,
            tmp_path / "cache",
            tokens_per_second=1000.0,
            workers=workers,
            shards_per_unit=shards_per_unit,
        ).totals
        return totals.wall_seconds - totals.planning_seconds, totals.seconds - totals.planning_seconds

    return plan


def test_each_work_unit_is_one_job_of_its_shards(planned):
    wall, total = planned(workers=64, shards_per_unit=1000)  # one unit: every shard, one after another
    assert total == pytest.approx(3.0) and wall == pytest.approx(total)
    wall, total = planned(workers=64, shards_per_unit=1)  # six units of about 500 tokens, side by side
    assert 0.5 <= wall <= (500 + 64) / 1000 and total == pytest.approx(3.0)
    wall, total = planned(workers=1, shards_per_unit=2)  # one worker runs the three units in turn
    assert wall == pytest.approx(total) and total == pytest.approx(3.0)
