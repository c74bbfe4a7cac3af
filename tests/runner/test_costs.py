"""rbplab plan: FLOPs and memory by hand, cache states, the wall time at n workers, CSV/JSON output,
and `rbplab run --plan` running nothing."""

from __future__ import annotations

import io
import json
import os
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
import torch

from rbplab.cli.app import main
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.runner.costs import estimate_costs, makespan
from rbplab.store import CacheEntry


@pytest.fixture
def cpu_only(monkeypatch):
    """Plan for the CPU whatever the machine has (the hand numbers below are the CPU's)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_flops_and_memory_of_micro_1_by_hand(tmp_path, cpu_only):
    # data/models/micro-1-25K/config.json: GPT-NeoX, hidden 32, 2 layers, 2 heads, MLP 128,
    # 4096 output rows (= the tokenizer's 4096 tokens), untied head, biases everywhere.
    d, layers, heads, f, V = 32, 2, 2, 128, 4096
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    S = layers * per_layer + 2 * d  # + the final layer norm
    assert S == 25_472  # the registry's S
    n_params = S + 2 * V * d  # embed_in and embed_out
    grid = Grid.from_names(["micro-1-25K"], ["prose"], max_tokens=3000, context_length=256)
    row = estimate_costs(grid, tmp_path / "cache", probe=False).table.iloc[0]
    per_token = 2 * S + 2 * d * V
    assert row["flops_per_token"] == per_token == 313_088
    assert row["tokens_to_score"] == 3000 and row["flops"] == 3000 * per_token
    assert row["weight_bytes"] == 4 * n_params  # float32 on a CPU, head not padded: no extra copy
    windows, length = 2_048 // 256, 256  # one batch of the CPU default batch_tokens at context 256
    tokens = windows * length
    widest = max(3 * d, f)  # the MLP's 128 rows against the fused QKV's 96
    assert row["activation_bytes"] == 4 * (tokens * (2 * d + widest) + windows * heads * length**2)
    # CPU head: chunks of 512 rows of float32 logits and a work block of 2**19 / 4096 = 128 rows,
    # the padded hidden rows of a chunk, and the batch's final hidden states in float32.
    assert row["head_chunk_bytes"] == 4 * (V * (512 + 128) + 512 * d + tokens * d)
    assert row["memory_bytes"] == row["weight_bytes"] + row["activation_bytes"] + row["head_chunk_bytes"]
    assert row["fits"] and row["state"] == "missing" and row["tokens_exact"]


def test_states_tokens_left_and_nothing_written(study_path, tmp_path):
    cache = tmp_path / "cache"
    run = run_study(Grid.read(study_path), cache_dir=cache, progress=False)
    keys = list(run.table["key"])
    cached, partial, missing = keys[0], keys[1], keys[2]
    manifest = CacheEntry.open(partial, cache).manifest()
    lost = int(manifest["shards"][1]["rows"])
    # Partial: the manifest and shard 1 gone, as when a run was stopped; missing: the entry gone.
    entry = CacheEntry.open(partial, cache)
    entry.manifest_path.unlink()
    for path in entry.path.glob("shard-00001.parquet*"):
        path.unlink()
    shutil.rmtree(CacheEntry.open(missing, cache).path)
    before = sorted(str(p) for p in cache.rglob("*"))

    plan = estimate_costs(Grid.read(study_path), cache, tokens_per_second=100.0, workers=2)
    table = plan.table.set_index("key")
    assert table.loc[cached, "state"] == "cached" and table.loc[cached, "tokens_to_score"] == 0
    assert table.loc[partial, "state"] == "partial" and table.loc[partial, "tokens_to_score"] == lost
    tokens = int(manifest["n_tokens"])
    assert 0 < lost < tokens and table.loc[partial, "tokens"] == tokens
    assert table.loc[missing, "state"] == "missing"
    assert table.loc[missing, "tokens_to_score"] == table.loc[missing, "tokens"] > 0
    assert table.loc[partial, "flops"] == lost * table.loc[partial, "flops_per_token"]
    assert sorted(str(p) for p in cache.rglob("*")) == before  # a plan writes nothing

    t = plan.totals
    assert (t.entries, t.cached, t.partial, t.missing) == (6, 4, 1, 1)
    rate = 100.0 * table["flops_per_token"].min()  # the given throughput is the cheapest model's
    # No probe, so no load time: planning (timed) then the scoring
    assert t.throughput.load_seconds_per_byte == 0 and 0 < t.planning_seconds < t.seconds
    assert t.seconds == pytest.approx(t.planning_seconds + table["flops"].sum() / rate)
    assert t.seconds / 2 <= t.wall_seconds <= t.seconds


def test_makespan_longest_first():
    assert makespan([3, 3, 2, 2, 2], 2) == 7  # 3+2+2 | 3+2
    assert makespan([5, 1, 1], 3) == 5
    assert makespan([], 4) == 0


def test_probe_measures_the_model_with_the_most_work(study_path, tmp_path):
    plan = estimate_costs(Grid.read(study_path), tmp_path / "cache", probe_tokens=64, probe_seconds=0.5)
    rate = plan.totals.throughput
    assert rate.measured and rate.tokens >= 64 and rate.seconds >= 0.5
    work = plan.table.groupby("model")["flops"].sum()  # every model's batch is cheap: the largest share
    assert rate.model == Path(work.idxmax()).name or rate.model == work.idxmax()
    assert rate.flops_per_token == plan.table.set_index("model").loc[work.idxmax(), "flops_per_token"].max()
    assert plan.table["seconds"].notna().all() and plan.totals.seconds > 0
    # The probe's model loaded in measurable time; every model's load counts once, on its first entry.
    assert rate.load_seconds_per_byte > 0
    table = plan.table
    scoring = table["flops"] / rate.flops_per_second
    loads = (table["seconds"] - scoring).round(9)
    first = ~table.duplicated("model")
    assert (loads[first] > 0).all() and (loads[~first] == 0).all()
    assert loads[first].tolist() == pytest.approx(
        (table["weight_bytes"] * rate.load_seconds_per_byte)[first].tolist()
    )


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(list(args))
    return status, out.getvalue()


def test_csv_and_json(study_path, tmp_path):
    cache = str(tmp_path / "cache")
    status, text = _cli(
        "plan", str(study_path), "--cache-dir", cache, "--tokens-per-second", "50", "--format", "csv"
    )
    assert status == 0
    frame = pd.read_csv(io.StringIO(text))
    assert len(frame) == 6 and set(frame["state"]) == {"missing"}
    assert {"key", "tokens_to_score", "flops", "memory_bytes", "device_bytes", "seconds"} <= set(
        frame.columns
    )
    status, text = _cli(
        "plan",
        str(study_path),
        "--cache-dir",
        cache,
        "--tokens-per-second",
        "50",
        "--format",
        "json",
        "--workers",
        "3",
    )
    data = json.loads(text)
    assert len(data["entries"]) == 6 and data["totals"]["workers"] == 3
    assert data["totals"]["tokens_to_score"] == frame["tokens_to_score"].sum()
    assert (
        data["totals"]["throughput"]["tokens_per_second"] == 50
        and not data["totals"]["throughput"]["measured"]
    )
    assert not Path(cache).exists()  # planning a study writes nothing to the cache


def test_grid_arguments(tmp_path, cpu_only):
    status, text = _cli(
        "plan", "-m", "micro-1-25K", "micro-2-85K", "-c", "prose", "--max-tokens", "1000",
        "--cache-dir", str(tmp_path / "cache"), "--no-probe",
    )  # fmt: skip
    assert status == 0
    assert "micro-2-85K" in text and "2 entries: 0 cached, 0 partial, 2 missing" in text
    assert "to score: 2,000 tokens" in text and "time: not estimated" in text  # --no-probe: no times


def test_run_plan_runs_nothing(study_path, tmp_path, capsys):
    cache = tmp_path / "cache"
    status = main(["run", str(study_path), "--plan", "--cache-dir", str(cache), "--no-probe"])
    out = capsys.readouterr().out
    assert status == 0 and "6 entries: 0 cached, 0 partial, 6 missing" in out
    assert not cache.exists()
    status = main(["plan", "--cache-dir", str(cache)])
    assert status == 1 and "give a study file" in capsys.readouterr().err


def test_gpu_workers_planned_from_a_cpu_driver(tmp_path, cpu_only):
    """`run --executor ray --gpus-per-task 1 --plan` on a machine without a GPU: the dtype a GPU
    resolves "auto" to (micro-1-25K's config says bfloat16), the memory of the head it resolves
    "auto" to for that dtype (the fused kernel) and the fp32 head's chunk when asked, one key for
    both, no memory to compare with and no probe of this CPU."""
    d, V, n_params, tokens = 32, 4096, 287_616, 16_384
    grid = Grid.from_names(["micro-1-25K"], ["prose"], max_tokens=1000, context_length=256)
    plan = estimate_costs(grid, tmp_path / "cache", accelerator=True)
    row = plan.table.iloc[0]
    assert row["dtype"] == "bfloat16"
    assert row["weight_bytes"] == 2 * n_params  # bf16 weights, which the fused head reads as they are
    # per token of a batch: seven 4-byte numbers and 64 candidate ids; settling's 7 float64 arrays of 2**22
    assert row["head_chunk_bytes"] == (7 + 64) * 4 * tokens + 7 * 2**22 * 8
    grid = Grid.from_names(["micro-1-25K"], ["prose"], max_tokens=1000, context_length=256, head="fp32")
    fp32 = estimate_costs(grid, tmp_path / "cache", accelerator=True).table.iloc[0]
    assert fp32["weight_bytes"] == 2 * n_params + 4 * V * d  # bf16 weights + the float32 head copy
    # GPU: chunks of min(4096, 2**25 // 4096) rows, the work block is the whole chunk
    assert fp32["head_chunk_bytes"] == 4 * (V * (4096 + 4096) + 4096 * d + tokens * d)
    assert fp32["key"] == row["key"]  # the head is not in the key: both give float64's counts
    assert row["device_bytes"] is None and row["fits"] is None and plan.totals.fits is None
    assert plan.totals.throughput is None and plan.totals.seconds is None
    cpu = estimate_costs(grid, tmp_path / "cache", probe=False).table.iloc[0]
    assert cpu["dtype"] == "float32" and cpu["key"] != row["key"]


def test_probe_reads_the_corpus_the_cheapest_model_has_most_to_score(tmp_path, cpu_only, monkeypatch):
    """The probe's windows come from the probed model's largest corpus, whatever the grid's
    corpus order, in batches of the run's size: a probe on HumanEval's short first documents (the
    demo's first corpus) measured half the throughput the run then had."""
    from rbplab.runner import costs

    probed = []
    probe = costs.probe_throughput
    monkeypatch.setattr(
        costs, "probe_throughput", lambda plan, *a, **k: probed.append((plan, a)) or probe(plan, *a, **k)
    )
    settings = {"max_tokens": None, "batch_tokens": 512}
    for corpora in (["humaneval", "prose"], ["prose", "humaneval"]):
        grid = Grid.from_names(["micro-1-25K", "micro-2-85K"], corpora, **settings)
        plan = estimate_costs(grid, tmp_path / "cache", probe_seconds=0)
        table = plan.table.set_index(["model", "corpus"])
        assert (
            table.loc[("micro-2-85K", "prose"), "tokens_to_score"]
            > table.loc[("micro-2-85K", "humaneval"), "tokens_to_score"]
        )
        used, (tokens, _) = probed[-1]
        # micro-2-85K: the most FLOPs to score, and its batch is cheap (see the next test)
        assert (used.described.model.keyed_name, used.corpus.name) == ("micro-2-85K", "prose")
        # probe_seconds=0: one timed batch of the run's 512 padded tokens
        assert tokens is None and 0 < plan.totals.throughput.tokens <= 512


def test_probe_scores_in_the_workers_setup(tmp_path, cpu_only, monkeypatch):
    """`--workers 2` runs its units in 2 single-threaded processes (here, 2 CPUs): the probe scores in
    2 such processes at once and times their start; `--workers 1` scores in this process, with its
    own threads. On a machine where another job kept a core busy, a probe with torch's default
    threads measured 23,411 tok/s where a single-threaded worker scored 75,421."""
    from rbplab.runner import costs
    from rbplab.runner.executors import worker_threads

    monkeypatch.setattr(costs.os, "cpu_count", lambda: 2)
    grid = Grid.from_names(["micro-1-25K", "micro-2-85K"], ["prose"], max_tokens=2000, context_length=256)
    before = torch.get_num_threads()
    one = estimate_costs(grid, tmp_path / "cache", probe_seconds=0.2).totals
    assert (one.throughput.processes, one.throughput.threads) == (1, before)
    assert one.throughput.startup_seconds == 0
    status, text = _cli(
        "plan", "-m", "micro-1-25K", "micro-2-85K", "-c", "prose", "--max-tokens", "2000",
        "--context-length", "256", "--cache-dir", str(tmp_path / "cache"), "--workers", "2",
        "--probe-seconds", "0.2", "--format", "json",
    )  # fmt: skip
    totals = json.loads(text)["totals"]
    rate = totals["throughput"]
    assert status == 0 and rate["measured"] and rate["processes"] == 2
    assert rate["threads"] == worker_threads(2) == max(1, (os.cpu_count() or 2) // 2)
    # each process scored for its 0.2 s, after starting as a worker does (imports, planning)
    assert rate["seconds"] >= 0.2 and rate["tokens"] > 0 and rate["startup_seconds"] > 0
    assert totals["wall_seconds"] >= totals["planning_seconds"] + rate["startup_seconds"]
    assert torch.get_num_threads() == before  # the driver's own setting is left as it was


def test_probe_in_this_process_uses_the_threads_asked(tmp_path, cpu_only):
    from rbplab.extraction.plan import plan_extraction
    from rbplab.runner.probe import probe_throughput

    before = torch.get_num_threads()
    plan = plan_extraction("micro-1-25K", "prose", max_tokens=2000, context_length=256)
    asked = 2 if before == 1 else 1
    rate = probe_throughput(plan, min_seconds=0.1, threads=asked)
    assert rate.threads == asked and rate.processes == 1 and rate.tokens > 0
    assert torch.get_num_threads() == before


def test_probe_scores_the_largest_share_of_work_its_batches_allow(tmp_path, cpu_only, monkeypatch):
    """A tiny model's time is mostly per-call cost, so its FLOP rate understates a larger model's:
    the probe scores the model with the most FLOPs to score whose batch stays within
    PROBE_BATCH_FLOPS (micro-6-2.7M, most of the demo's work), else the cheapest."""
    from rbplab.runner import costs

    probed = []
    monkeypatch.setattr(
        costs, "probe_throughput", lambda plan, *a, **k: probed.append(plan.described.model.keyed_name)
    )
    grid = Grid.from_names(["micro-1-25K", "micro-6-2.7M"], ["prose"], max_tokens=3000, context_length=256)
    estimate_costs(grid, tmp_path / "cache")
    assert probed[-1] == "micro-6-2.7M"
    table = estimate_costs(grid, tmp_path / "cache", probe=False).table.set_index("model")
    big = table.loc["micro-6-2.7M", "flops_per_token"] * 2_048  # one CPU batch
    monkeypatch.setitem(costs.PROBE_BATCH_FLOPS, "cpu", big - 1)
    estimate_costs(grid, tmp_path / "cache")
    assert probed[-1] == "micro-1-25K"


def test_the_demos_plan_line_says_how_the_probe_measured():
    """`make demo` opens with this line: the rate, the model and the workers' setup it was measured in."""
    from rbplab.cli.demo import plan_line
    from rbplab.runner.costs import CostTotals
    from rbplab.runner.probe import Throughput

    rate = Throughput("micro-6-2.7M", 466.0, 7e6, "cpu", True, 4080, 4.4, 1e-9, threads=1, processes=2)
    totals = CostTotals(
        entries=24, cached=0, partial=0, missing=24, damaged=0, unknown=0, tokens_to_score=9_197_550,
        tokens_exact=True, flops=6e13, seconds=7000.0, workers=2, wall_seconds=3500.0,
        memory_bytes=1, device="cpu (RAM)", device_bytes=2, fits=True, throughput=rate,
        planning_seconds=30.0, unreachable={},
    )  # fmt: skip
    assert plan_line(totals) == (
        "plan: 24 entries, 0 cached, 24 to score (9,197,550 tokens), about 3500 s at 2 workers "
        "(probe: 466 tok/s per worker of micro-6-2.7M, 1 torch thread in each of 2 worker processes "
        "scoring at once)"
    )
