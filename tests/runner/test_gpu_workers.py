"""Workers on GPUs, checked without one: one GPU per local worker (a faked device count), Ray GPU
tasks in fresh processes on distinct declared GPUs, a loaded model serving every unit of that
model, and workers that die with their driver."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.models import DOCUMENTS

from rbplab.core import ExtractionSettings
from rbplab.extraction import pipeline
from rbplab.extraction import plan as plan_module
from rbplab.grid import Grid
from rbplab.runner import executors, run_study
from rbplab.runner import units as units_module
from rbplab.runner.executors import run_processes, worker_devices
from rbplab.runner.units import plan_study
from rbplab.store import CacheEntry


def test_worker_devices_round_robin():
    auto = ExtractionSettings()
    assert worker_devices(4, ["0", "1", "2", "3"], auto) == ["0", "1", "2", "3"]
    assert worker_devices(3, ["5", "7"], auto) == ["5", "7", "5"]  # more workers than GPUs
    assert worker_devices(2, [], auto) == [None, None]  # no GPU: nothing set
    # settings that place the model themselves keep every GPU visible
    assert worker_devices(2, ["0", "1"], ExtractionSettings(device_map="auto")) == [None, None]
    assert worker_devices(2, ["0", "1"], ExtractionSettings(device="cuda:1")) == [None, None]
    assert worker_devices(2, ["0", "1"], ExtractionSettings(device="cpu")) == [None, None]


def test_visible_gpus_follow_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3,GPU-abc")
    assert executors.visible_gpus() == ["2", "3", "GPU-abc"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert executors.visible_gpus() == []


@pytest.mark.slow  # spawned processes import torch and transformers
def test_local_workers_get_one_gpu_each(study_path, tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "visible_gpus", lambda: ["0", "1"])  # a 2-GPU machine
    plan = plan_study(Grid.read(study_path), tmp_path / "cache", shards_per_unit=1)
    outcomes = run_processes(plan.units, tmp_path / "cache", lambda _n: None, workers=2)
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes if o.error]
    seen = collections.defaultdict(set)
    for outcome in outcomes:
        seen[outcome.result.producer].add(outcome.result.visible_devices)
    # each worker process ran every one of its units on one GPU, and no two workers share one
    assert all(len(devices) == 1 for devices in seen.values()), seen
    devices = [next(iter(d)) for d in seen.values()]
    assert set(devices) <= {"0", "1"} and len(set(devices)) == len(devices), seen


def test_a_worker_loads_each_model_once(study_path, tmp_path, monkeypatch):
    loads = collections.Counter()
    tokenised = []
    load_weights, tokenize = pipeline.load_weights, plan_module.tokenize_documents

    def counting_load(described):
        loads[described.model.model] += 1
        return load_weights(described)

    def counting_tokenize(tokenizer, texts, **options):
        tokenised.append(len(texts))
        return tokenize(tokenizer, texts, **options)

    monkeypatch.setattr(pipeline, "load_weights", counting_load)
    monkeypatch.setattr(plan_module, "tokenize_documents", counting_tokenize)
    kept = []
    release = units_module.release_models
    monkeypatch.setattr(units_module, "_LOADED", {})
    monkeypatch.setattr(
        executors, "release_models", lambda: kept.append(len(units_module._LOADED)) or release()
    )
    monkeypatch.setattr(plan_module, "_WINDOW_MEMO", collections.OrderedDict())  # as a fresh process
    run = run_study(Grid.read(study_path), cache_dir=tmp_path / "cache", progress=False, shards_per_unit=1)
    assert run.ok and len(run.table) == 6
    plan = plan_study(Grid.read(study_path), tmp_path / "cache", shards_per_unit=1)
    assert len(plan.units) > 2 * 6  # several units of every model
    # 3 models, each loaded once for its 2 corpora x several units
    assert sorted(loads.values()) == [1, 1, 1], loads
    # the 3 models share one tokenizer: each of the 2 corpora is tokenised once in this process
    assert len(tokenised) == 2, tokenised
    # one model held at a time, and none left in this process once the run is over
    assert kept == [1] and units_module._LOADED == {}


def _worker_pids(driver: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == driver and b"spawn_main" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # a driver and two spawned workers import torch and transformers
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_exit_when_their_driver_is_killed(tmp_path, gpt2_dir, neox_dir):
    # A study long enough that the driver is still running when its first shards land.
    lines = [json.dumps({"id": f"{i}-{d}", "text": t}) for i in range(40) for d, t in DOCUMENTS]
    (tmp_path / "long.jsonl").write_text("\n".join(lines) + "\n")
    models = ", ".join(json.dumps(str(p)) for p in (gpt2_dir, neox_dir))
    study = tmp_path / "study.toml"
    study.write_text(
        f'models = [{models}]\ncorpora = ["long.jsonl"]\n[settings]\ncontext_length = 32\nshard_tokens = 40\n'
    )
    cache = tmp_path / "cache"
    driver = subprocess.Popen(
        [sys.executable, "-m", "rbplab", "run", str(study), "--workers", "2", "--shards-per-unit", "1"]
        + ["--cache-dir", str(cache), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 300
        while not list(cache.rglob("shard-*.parquet")) and driver.poll() is None:
            assert time.monotonic() < deadline, "no shard was written"
            time.sleep(0.2)
        workers = _worker_pids(driver.pid)
        assert driver.poll() is None and len(workers) == 2, (workers, driver.stderr.read()[-2000:])
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [p for p in workers if _alive(p)]
    finally:
        if driver.poll() is None:
            driver.kill()
    for pid in alive:
        os.kill(pid, signal.SIGKILL)  # leave nothing behind, then report
    assert alive == [], f"workers {alive} outlived their driver by 5 s"
    # what the killed run left is whole shards or nothing: a re-run completes it
    run = run_study(Grid.read(study), cache_dir=cache, progress=False, shards_per_unit=1)
    assert run.ok and (run.table["state"] == "computed").all()
    for key in run.table["key"]:
        assert CacheEntry.open(key, cache).is_complete()


def test_ray_gpu_task_groups_keep_a_model_together():
    from types import SimpleNamespace

    from rbplab.runner.executors import task_groups

    auto, other = ExtractionSettings(), ExtractionSettings(max_tokens=10)
    # model and settings of 8 units: model a with two settings, model b
    pairs = [("a", auto), ("a", other), ("b", auto), ("a", auto), ("a", auto), ("b", auto)]
    units = [SimpleNamespace(ref=ref, settings=settings) for ref, settings in pairs + [("a", auto)] * 2]
    # 8 units on 2 GPUs: groups of at most 4, each of one model and settings, order kept
    assert task_groups(units, 2) == [[0, 3, 4, 6], [7], [1], [2, 5]]
    assert task_groups(units, 100) == [[i] for i in (0, 3, 4, 6, 7, 1, 2, 5)]  # more GPUs than units
    assert sorted(i for g in task_groups(units, 1) for i in g) == list(range(8))
