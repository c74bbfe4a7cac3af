"""Planning for GPU workers on a driver without one: dtype as a GPU resolves it, GPUs per unit."""

from __future__ import annotations

import json
import shutil

import pytest

from rbplab.grid import Grid
from rbplab.runner.executors import WEIGHT_SHARE_OF_GPU, gpus_needed
from rbplab.runner.units import plan_study, run_unit
from rbplab.store import CacheEntry


def test_gpus_needed():
    gib = 2**30
    assert gpus_needed(10 * gib, None, 1) == 1  # unknown GPU memory: the requested count
    assert gpus_needed(10 * gib, 80 * gib, 1) == 1
    assert gpus_needed(28 * gib, 40 * gib, 1) == 2  # 28 GiB > 0.6 x 40 GiB
    assert gpus_needed(int(3.1 * WEIGHT_SHARE_OF_GPU * 16 * gib), 16 * gib, 1) == 4
    assert gpus_needed(28 * gib, 40 * gib, 0) == 0  # CPU-only tasks stay CPU-only


@pytest.mark.parametrize("stored", ["bfloat16", "float32"])
def test_accelerator_plans_with_the_dtype_a_gpu_resolves(tmp_path, gpt2_dir, tiny_corpus, stored):
    model = tmp_path / "model"
    shutil.copytree(gpt2_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = stored
    (model / "config.json").write_text(json.dumps(config))
    (tmp_path / "c.jsonl").write_text(
        "".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in tiny_corpus.documents)
    )
    study = Grid.read(
        {"models": [str(model)], "corpora": [str(tmp_path / "c.jsonl")], "settings": {"context_length": 32}}
    )
    cpu = plan_study(study, tmp_path / "cache")
    gpu = plan_study(study, tmp_path / "cache", accelerator=True)
    assert cpu.units[0].settings.dtype == "auto" and gpu.units[0].settings.dtype == stored
    # head "auto" stays as asked: each worker resolves it on its own device (not in the key)
    assert cpu.units[0].settings.head == gpu.units[0].settings.head == "auto"
    assert (gpu.units[0].key == cpu.units[0].key) == (stored == "float32")  # dtype is in the key
    assert gpu.units[0].weight_bytes == cpu.units[0].weight_bytes // (2 if stored == "bfloat16" else 1)
    # A worker re-plans the unit it is given and arrives at the driver's key.
    result = run_unit(gpu.units[0], tmp_path / "cache")
    assert result.key == gpu.units[0].key and CacheEntry.open(result.key, tmp_path / "cache").is_complete()
