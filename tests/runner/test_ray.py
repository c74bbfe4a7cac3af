"""The Ray executor on a local cluster (num_cpus=2, no dashboard) inside a loopback-only network
namespace: byte-identical to the local executor, a killed worker is retried, bad addresses fail
at once. Ray binds the machine's interface address by itself, so the cluster runs under
`unshare -n` where only 127.0.0.1 exists; where that is refused the tests are skipped."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time

import pytest
from helpers.studies import SETTINGS, shard_bytes, summary_bytes

from rbplab.core import ExtractionSettings
from rbplab.extraction.scoring import CRASH_HOOK_ENV
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.runner.executors import ExecutorError
from rbplab.store import CacheEntry, list_entries


def _netns_available() -> str | None:
    try:
        proc = subprocess.run(
            ["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare is not available ({err})"
    return None if proc.returncode == 0 else f"unshare -n is refused here: {proc.stderr.decode().strip()}"


def json_table(stdout: str) -> list[dict]:
    """The run's JSON table; Ray's raylet may print its own lines (a worker died) before it."""
    start = re.search(r"^\[$", stdout, re.M)
    assert start, stdout[-2000:]
    return json.loads(stdout[start.start() :])


def ray_run(study, cache, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "rbplab",
        "run",
        str(study),
        "--executor",
        "ray",
        "--num-cpus",
        "2",
        "--cache-dir",
        str(cache),
        "--shards-per-unit",
        "1",
        "--no-progress",
        "--format",
        "json",
        *extra,
    ]
    script = "ip link set lo up && exec " + " ".join(shlex.quote(c) for c in command)
    return subprocess.run(
        ["unshare", "-n", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'rbplab[ray]')"
)


@pytest.fixture(scope="module")
def netns():
    reason = _netns_available()
    if reason:
        pytest.skip(reason)


@needs_ray
@pytest.mark.ray
@pytest.mark.slow
def test_ray_equals_local_byte_for_byte(netns, study_path, tmp_path):
    local = run_study(Grid.read(study_path), cache_dir=tmp_path / "local", progress=False, shards_per_unit=1)
    proc = ray_run(study_path, tmp_path / "ray")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json_table(proc.stdout)
    assert {r["key"] for r in table} == set(local.table["key"]) and all(
        r["state"] == "computed" for r in table
    )
    assert shard_bytes(tmp_path / "ray") == shard_bytes(tmp_path / "local")
    # each entry's summary is written by the worker that finalised it, the same bytes as locally
    assert len(summary_bytes(tmp_path / "ray")) == len(table)
    assert summary_bytes(tmp_path / "ray") == summary_bytes(tmp_path / "local")


@needs_ray
@pytest.mark.ray
@pytest.mark.slow
def test_killed_worker_is_retried(netns, study_path, tmp_path):
    marker = tmp_path / "crashed"
    proc = ray_run(study_path, tmp_path / "ray", env={CRASH_HOOK_ENV: str(marker)})
    assert marker.exists(), "the test hook did not kill a worker"
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json_table(proc.stdout)
    assert all(r["state"] == "computed" for r in table)
    local = run_study(Grid.read(study_path), cache_dir=tmp_path / "local", progress=False, shards_per_unit=1)
    assert shard_bytes(tmp_path / "ray") == shard_bytes(tmp_path / "local")
    # The killed worker's finished shard was kept and the retry (another process) did the rest.
    producers = [
        CacheEntry.open(k, tmp_path / "ray").manifest()["provenance"]["producers"] for k in local.table["key"]
    ]
    assert max(len(p) for p in producers) >= 2


@needs_ray
@pytest.mark.ray
def test_unreachable_address_fails_at_once_and_starts_nothing(study_path, tmp_path):
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rbplab",
            "run",
            str(study_path),
            "--executor",
            "ray",
            "--address",
            "127.0.0.1:9",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and time.perf_counter() - started < 60
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach a Ray cluster at 127.0.0.1:9" in lines[0], proc.stderr
    assert list_entries(tmp_path / "cache").empty


def test_missing_ray_is_a_one_line_error(study_path, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ExecutorError, match=r"needs Ray: pip install 'rbplab\[ray\]'"):
        run_study(Grid.read(study_path), executor="ray", cache_dir=tmp_path / "cache", progress=False)
    assert list_entries(tmp_path / "cache").empty
    with pytest.raises(ValueError, match="executor must be one of"):
        run_study(Grid.read(study_path), executor="dask", cache_dir=tmp_path / "cache", progress=False)
    assert ExtractionSettings(**SETTINGS).shard_tokens == 40


RAY_PROBE = textwrap.dedent(
    """
    import json, os, time
    import ray
    from rbplab.runner.executors import ray_remote

    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")

    def probe():
        import os, time
        import ray
        start = time.time()
        time.sleep(1.0)
        gpus = [str(g) for g in ray.get_gpu_ids()]
        return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"), gpus, start, time.time()

    task = ray_remote(ray, probe, cpus=1, gpus=1, max_retries=0)
    print(json.dumps(ray.get([task.remote() for _ in range(6)])))
    """
)


@needs_ray
@pytest.mark.ray
def test_ray_gpu_tasks_get_fresh_processes_on_distinct_gpus(netns, tmp_path):
    """A local cluster declaring 2 GPUs (none exist): Ray hands each GPU task its own
    CUDA_VISIBLE_DEVICES; tasks through `ray_remote` run in fresh processes, never 2 on one GPU."""
    script = tmp_path / "probe.py"
    script.write_text(RAY_PROBE)
    command = f"ip link set lo up && exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    proc = subprocess.run(["unshare", "-n", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 6
    for pid, visible, gpu_ids, _, _ in results:
        assert visible in ("0", "1") and gpu_ids == [visible], (pid, visible, gpu_ids)
    # max_calls=1: every GPU task in a process of its own (a reused one keeps its first CUDA context)
    assert len({r[0] for r in results}) == 6, results
    # tasks that ran at the same time were on different GPUs
    for a in results:
        for b in results:
            if a is not b and a[3] < b[4] and b[3] < a[4]:
                assert a[1] != b[1], (a, b)
