"""The GPU check and the GPU benchmark stay runnable between the sessions that are lent a GPU: the
check's part (a) runs here on the CPU (the fused head through Triton's interpreter), and the
benchmark reports a child that fails instead of waiting for it."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def test_gpu_check_smoke_run_ranks_exactly_with_both_heads():
    """Part (a) ranks micro-1's states exactly with both heads (interpreted), batch-invariantly, and
    part (d) runs `rbplab run` end to end with the fused head and reads back its manifest."""
    pytest.importorskip("triton", reason="the fused head's kernel needs Triton (the dev extra)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--smoke", "--exact-tokens", "100"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("micro-1-25K float32")]
    assert [row[2] for row in rows] == ["fp32", "fused", "fused"]
    for row in rows[:2]:  # model, dtype, head, tokens, exact, differ, settled, dnll, cert, b.inv
        assert row[3] == "100" and row[4] == "100.0000%" and row[5] == "0" and row[8] == "0"
        assert row[9] == "yes"
    assert rows[2][3] == "100" and rows[2][-4].endswith("%")  # (d): tokens, rows settled
    assert "all parts ran" in done.stdout


def test_bench_gpu_reports_a_failed_child_with_its_exit_code(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_gpu

    args = bench_gpu.resolve(bench_gpu.parser().parse_args(["--device", "cpu", "--timeout", "60"]))
    # A model the benchmark does not know fails in the child (KeyError), before any weights.
    result = bench_gpu.run_approach("bare forward", "no-such-model", args, mp.get_context("spawn"))
    assert result == "exit code 1"
