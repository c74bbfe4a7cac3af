"""rbplab run: local runs, SLURM-style slices and concurrent drivers give the results of extract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.extraction import extract_run
from helpers.studies import SETTINGS, shard_bytes, summary_bytes

from rbplab.core import ExtractionSettings
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.runner.units import plan_study, slice_units
from rbplab.store import CacheEntry


def test_local_run_equals_extract_and_resumes(study_path, tmp_path):
    cache = tmp_path / "cache"
    first = run_study(Grid.read(study_path), cache_dir=cache, progress=False, shards_per_unit=2)
    assert first.ok and len(first.table) == 6 and (first.table["state"] == "computed").all()
    assert (first.table["computed"] == first.table["tokens"]).all()
    study = Grid.read(study_path)
    reference = tmp_path / "reference"
    for member in study.members:
        for corpus in study.corpora:
            result = extract_run(
                member.source, corpus, ExtractionSettings(**SETTINGS), cache_dir=reference, progress=False
            )
            assert result.key in set(first.table["key"])
            assert CacheEntry.open(result.key, cache).manifest()["n_tokens"] == result.n_tokens
    assert shard_bytes(cache) == shard_bytes(reference)
    again = run_study(Grid.read(study_path), cache_dir=cache, progress=False)
    assert again.ok and (again.table["state"] == "cached").all() and (again.table["computed"] == 0).all()


def test_slices_are_disjoint_and_cover_every_unit(study_path, tmp_path):
    plan = plan_study(Grid.read(study_path), tmp_path / "cache", shards_per_unit=1)
    slices = [slice_units(plan.units, i, 3) for i in range(3)]
    names = [u.name for s in slices for u in s]
    assert sorted(names) == sorted(u.name for u in plan.units) and len(set(names)) == len(names)
    assert len(plan.units) > 6  # several units per entry
    with pytest.raises(ValueError, match="task index"):
        slice_units(plan.units, 3, 3)
    empty = tmp_path / "untouched"
    with pytest.raises(ValueError, match="task index"):  # refused before planning writes anything
        run_study(Grid.read(study_path), cache_dir=empty, task_index=3, num_tasks=3, progress=False)
    assert not empty.exists()


def _rbplab(*args: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rbplab",
            "run",
            *args,
            "--cache-dir",
            str(cache),
            "--no-progress",
            "--format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow  # fresh interpreters import torch and transformers
def test_slurm_array_tasks_and_two_drivers(study_path, tmp_path):
    # Three array tasks as separate processes: every entry completes, each shard is computed once.
    slurm = tmp_path / "slurm"
    tasks = [
        _rbplab(
            str(study_path), "--task-index", str(i), "--num-tasks", "3", "--shards-per-unit", "1", cache=slurm
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=600) for p in tasks]
    assert all(p.returncode == 0 for p in tasks), [o[1][-2000:] for o in outs]
    computed = sum(row["computed"] for out, _ in outs for row in json.loads(out))
    final = run_study(Grid.read(study_path), cache_dir=slurm, progress=False)
    assert (final.table["state"] == "cached").all()
    assert computed == final.table["tokens"].sum()  # no shard computed twice
    # Two drivers on the same study at once: both finish, nothing is computed twice, same bytes.
    both = tmp_path / "both"
    drivers = [_rbplab(str(study_path), "--shards-per-unit", "1", cache=both) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in drivers]
    assert all(p.returncode == 0 for p in drivers), [o[1][-2000:] for o in outs]
    computed = sum(row["computed"] for out, _ in outs for row in json.loads(out))
    assert computed == final.table["tokens"].sum()
    assert shard_bytes(both) == shard_bytes(slurm)
    for key in final.table["key"]:
        manifest = CacheEntry.open(key, both).manifest()
        assert manifest["n_tokens"] == sum(s["rows"] for s in manifest["shards"])


@pytest.mark.slow  # spawned processes import torch and transformers
def test_worker_processes_equal_one_process(study_path, tmp_path):
    one = run_study(Grid.read(study_path), cache_dir=tmp_path / "one", progress=False, shards_per_unit=1)
    two = run_study(
        Grid.read(study_path), cache_dir=tmp_path / "two", progress=False, shards_per_unit=1, workers=2
    )
    assert one.ok and two.ok and (two.table["state"] == "computed").all()
    assert list(two.table["key"]) == list(one.table["key"])
    assert shard_bytes(tmp_path / "two") == shard_bytes(tmp_path / "one")
    assert len(summary_bytes(tmp_path / "two")) == len(two.table)
    assert summary_bytes(tmp_path / "two") == summary_bytes(tmp_path / "one")
    producers = {
        p
        for key in two.table["key"]
        for p in CacheEntry.open(key, tmp_path / "two").manifest()["provenance"]["producers"]
    }
    assert len(producers) == 2  # both processes wrote shards
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        run_study(Grid.read(study_path), cache_dir=tmp_path / "one", workers=0)


def test_the_grid_is_the_only_request(tmp_path):
    """A study file is read into its Grid first (`Grid.read`); a path alone is refused at once."""
    with pytest.raises(
        ValueError, match=r"run_study takes a Grid, got \w*Path; read a study file with Grid\.read"
    ):
        run_study(tmp_path / "study.toml", cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()
