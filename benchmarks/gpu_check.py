"""The GPU check: is rbplab exact and fast on a GPU, end to end? One command, sized for under 8
minutes on one H100 or H200, no network. Whoever is lent a GPU runs it first and commits its output
under benchmarks/results/; the docs quote what it prints (the one source of the speed ratios).

    PYTHONPATH=. python3 benchmarks/gpu_check.py --commit $(git rev-parse --short HEAD) \\
        | tee benchmarks/results/gpu_check-$(date +%F).txt

It prints, with the date, the GPU, the versions and the commit:
(a) exactness against float64, per model shape and head, on the GPU: the micro-suite models
    (data/models, bundled prose corpus; float32 and bfloat16 bodies) and random models shaped like
    GPT-2 small (bfloat16 and float16), Qwen2.5-0.5B (bfloat16) and Gemma-2-2B's head (|V| 256,000,
    softcap 30, on 2 layers; bfloat16), on synthetic ids. Both heads rank the same hidden states; the
    reference multiplies them with the head in float64 (and caps in float64). Per model and head: %
    of tokens whose (n_greater, n_equal) equal the reference's, % of rows the head settled in
    float64 (a logit inside the error band of `rbplab.extraction.exact`), the largest |nll - nll_64|,
    certificate failures (a target's in-tile logit outside its own band), batch invariance (the same
    rows ranked again in another mix of rows: reversed, in two calls, must give the same counts), and
    the head's seconds;
(b) speed: bare bf16 forward vs fp32 head vs fused head, GPT-2 small, Qwen2.5-0.5B and -7B shapes,
    context 2,048, 262,144 scored tokens each (benchmarks/bench_gpu.py: tok/s, ratio to the bare
    forward, peak memory with the fp32 head's copy, rows settled);
(c) the fp32 head's GPU chunk size tried at 2-3 sizes (Qwen2.5-0.5B shape);
(d) end to end: random models of those shapes written to disk (with the micro-suite's tokenizer),
    then `rbplab run` of a study of each on the prose corpus on CUDA (head "auto": the fused kernel
    for a half-precision body), beside a bare forward over the same windows: the run's wall time and
    scoring time against the bare forward's, rows settled (from the entry's manifest), and the peak
    GPU memory against `rbplab plan`'s estimate.
Exit status 1 if any part failed to run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bench_gpu
import torch

ROOT = Path(__file__).resolve().parents[1]
MICRO = ("micro-1-25K", "micro-2-85K", "micro-3-200K", "micro-4-559K", "micro-5-1.2M", "micro-6-2.7M")
TOKENIZER = ROOT / "data" / "models" / "micro-1-25K"  # |V| 4,096: ids valid for every shape here
END_TO_END = (
    ("gpt2", "bfloat16"),
    ("gpt2", "float16"),
    ("qwen2.5-0.5b", "bfloat16"),
    ("gemma2-head", "bfloat16"),
)


def versions(commit: str | None) -> str:
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (
        f"# rbplab GPU check, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit or 'unknown'}\n"
        f"# {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton_version}, "
        f"transformers {transformers.__version__}, Python {platform.python_version()}"
    )


def float64_ranks(hidden: torch.Tensor, head, targets: torch.Tensor, vocab: int, softcap, rows: int = 512):
    """Per block of rows: (start, n_greater, n_equal, nll), all in float64 from the same inputs."""
    w = head.weight[:vocab].double()
    b = None if getattr(head, "bias", None) is None else head.bias[:vocab].double()
    for start in range(0, hidden.shape[0], rows):
        z = hidden[start : start + rows].double() @ w.T
        if b is not None:
            z += b
        if softcap:
            z = torch.tanh(z / softcap) * softcap
        z_t = z.gather(1, targets[start : start + rows, None].long())
        yield start, (z > z_t).sum(1), (z == z_t).sum(1), torch.logsumexp(z, 1) - z_t[:, 0]


def batch_invariant(rank, hidden: torch.Tensor, targets: torch.Tensor, first) -> bool:
    """The rows of `hidden` ranked again reversed, in two calls of unequal size, give `first`'s
    counts row for row."""
    n = hidden.shape[0]
    order = torch.arange(n - 1, -1, -1, device=hidden.device)
    cut = max(1, n // 3)
    parts = [rank(hidden[order[:cut]], targets[order[:cut]]), rank(hidden[order[cut:]], targets[order[cut:]])]
    again = [torch.cat([p[i] for p in parts]) for i in range(2)]
    return all(torch.equal(again[i], first[i][order]) for i in range(2))


def exactness(label: str, model, batches: list, vocab: int) -> list[str]:
    """Both heads against float64 on the hidden states of `batches`; one line per head."""
    from rbplab.extraction.fused_head import HeadCertificateError
    from rbplab.extraction.heads import RankHead
    from rbplab.extraction.precision import pinned_precision
    from rbplab.extraction.scoring import Scorer

    softcap = getattr(model.config, "final_logit_softcapping", None)
    scorer = Scorer(model, vocab, 0, softcap)
    heads = {
        name: RankHead(name, model.get_output_embeddings(), vocab, softcap) for name in ("fp32", "fused")
    }
    tally = {
        h: {"tokens": 0, "exact": 0, "nll": 0.0, "certificate": 0, "seconds": 0.0, "invariant": True}
        for h in heads
    }
    with torch.inference_mode(), pinned_precision():
        for b, (length, group) in enumerate(batches):
            hidden, targets = scorer.hidden_states(length, group)
            results = {}
            for name, head in heads.items():
                bench_gpu._sync(hidden.device)
                started = time.perf_counter()
                try:
                    results[name] = head(hidden, targets)
                except HeadCertificateError:
                    tally[name]["certificate"] += 1
                bench_gpu._sync(hidden.device)
                tally[name]["seconds"] += time.perf_counter() - started
                if b == 0 and name in results:
                    tally[name]["invariant"] = batch_invariant(head, hidden, targets, results[name])
            for start, g64, e64, nll64 in float64_ranks(hidden, scorer.head.module, targets, vocab, softcap):
                rows = slice(start, start + len(g64))
                for name, (g, e, nll) in results.items():
                    t = tally[name]
                    same = (g[rows].long() == g64) & (e[rows].long() == e64)
                    t["tokens"] += len(g64)
                    t["exact"] += int(same.sum())
                    t["nll"] = max(t["nll"], float((nll[rows].double() - nll64).abs().max()))
    lines = []
    for name, t in tally.items():
        exact = 100.0 * t["exact"] / max(t["tokens"], 1)
        settled = 100.0 * heads[name].tally.settled / max(heads[name].tally.rows, 1)
        lines.append(
            f"{label:<30}{name:<7}{t['tokens']:>8,}{exact:>10.4f}%{t['tokens'] - t['exact']:>8}"
            f"{settled:>9.2f}%{t['nll']:>12.2e}{t['certificate']:>6}{'yes' if t['invariant'] else 'NO':>6}"
            f"{t['seconds']:>9.2f}"
        )
    return lines


def micro_batches(name: str, dtype: str, tokens: int):
    from rbplab.extraction.plan import plan_extraction
    from rbplab.extraction.scoring import batches
    from rbplab.extraction.weights import load_weights

    plan = plan_extraction(str(ROOT / "data" / "models" / name), "prose", max_tokens=tokens, dtype=dtype)
    windows = [w for shard in plan.shards for w in shard]
    model = load_weights(plan.described)
    return model, list(batches(windows, 16_384, plan.policy.context_length)), plan.vocab_size


def random_batches(name: str, dtype: str, tokens: int):
    model = bench_gpu.build_model(name, 2048, torch.device("cuda"), getattr(torch, dtype))
    vocab = model.config.vocab_size
    return model, bench_gpu.synthetic_batches(vocab, 2048, tokens, 16_384), vocab


def part_a(tokens: int, smoke: bool = False) -> bool:
    print("\n## (a) exactness against float64 (hidden states of the model's own body)")
    print(
        f"{'model':<30}{'head':<7}{'tokens':>8}{'exact':>11}{'differ':>8}{'settled':>10}{'max |dnll|':>12}"
        f"{'cert':>6}{'b.inv':>6}{'head s':>9}"
    )
    print(
        "# differ: tokens whose (n_greater, n_equal) differ from float64's (the aim: 0); settled: rows\n"
        "# with a logit inside their error band, settled in float64; cert: calls refused because a\n"
        "# target's in-tile logit fell outside its band; b.inv: the first batch's rows ranked again\n"
        "# reversed and in two calls give the same counts; head s: the head's seconds"
    )
    ok = True
    runs = [
        (f"{m} {d}", lambda m=m, d=d: micro_batches(m, d, tokens))
        for m in MICRO
        for d in ("float32", "bfloat16")
    ]
    runs += [
        (f"{m} {d} (random)", lambda m=m, d=d: random_batches(m, d, tokens))
        for m, d in (
            ("gpt2", "bfloat16"),
            ("gpt2", "float16"),
            ("qwen2.5-0.5b", "bfloat16"),
            ("gemma2-head", "bfloat16"),
        )
    ]
    for label, make in runs[:1] if smoke else runs:
        try:
            model, batches, vocab = make()
            for line in exactness(label, model, batches, vocab):
                print(line, flush=True)
            del model
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception as err:  # noqa: BLE001 - one failed model must not hide the others' figures
            ok = False
            print(f"{label:<30}FAILED: {type(err).__name__}: {' '.join(str(err).split())[:300]}", flush=True)
    return ok


def part_bc(tokens: int, chunk_rows: list[int], timeout: float) -> bool:
    print("\n## (b) speed: bare bf16 forward vs fp32 head vs fused head; (c) fp32 head chunk sizes")
    args = bench_gpu.parser().parse_args(
        ["--device", "cuda", "--tokens", str(tokens), "--timeout", str(timeout)]
    )
    ok = True
    for models, rows in ((["gpt2"], []), (["qwen2.5-0.5b"], chunk_rows), (["qwen2.5-7b"], [])):
        args.models, args.chunk_rows = models, rows
        ok &= bench_gpu.print_table(bench_gpu.resolve(args))
    return ok


def write_model(name: str, dtype: str, folder: Path) -> Path:
    """A random model of `name`'s shape saved as a checkpoint folder, with the micro-suite's tokenizer."""
    model = bench_gpu.build_model(name, 2048, torch.device("cuda"), getattr(torch, dtype))
    model.config.torch_dtype = getattr(torch, dtype)
    model.save_pretrained(folder, safe_serialization=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / file, folder / file)
    del model
    torch.cuda.empty_cache()
    return folder


def bare_seconds(folder: Path, settings: dict) -> float:
    """A bare forward (`model(ids).logits`, use_cache=False) over the windows a run of `folder`
    scores, batched as it batches them; after one warm-up batch."""
    from transformers import AutoModelForCausalLM

    from rbplab.extraction.plan import plan_extraction
    from rbplab.extraction.scoring import batch_arrays, batches, default_batch_tokens

    device = torch.device(settings["device"])
    plan = plan_extraction(str(folder), "prose", **settings)
    windows = [w for shard in plan.shards for w in shard]
    groups = list(batches(windows, default_batch_tokens(device), plan.policy.context_length))
    model = (
        AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, settings["dtype"]))
        .to(device)
        .eval()
    )
    with torch.inference_mode():
        for i, (length, group) in enumerate(groups):
            if i == 1:
                bench_gpu._sync(device)
                started = time.perf_counter()
            ids = torch.from_numpy(batch_arrays(group, length, 0)[0]).to(device)
            _ = model(input_ids=ids, use_cache=False).logits
        bench_gpu._sync(device)
    seconds = time.perf_counter() - started if len(groups) > 1 else float("nan")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    # the warm-up batch is left out: scale to every batch's tokens
    scored = sum(w.n_scored for _, g in groups for w in g)
    return seconds * scored / max(1, scored - sum(w.n_scored for w in groups[0][1]))


def part_d(tokens: int, smoke: bool = False) -> bool:
    from rbplab.grid import Grid
    from rbplab.runner.costs import estimate_costs
    from rbplab.runner.run import run_study
    from rbplab.store.cache.entry import CacheEntry

    print("\n## (d) end to end: rbplab run on CUDA of random models written to disk, against a bare forward")
    print(
        f"{'model':<24}{'head':<7}{'tokens':>8}{'run s':>8}{'score s':>9}{'bare s':>8}{'run/bare':>9}"
        f"{'score/bare':>11}{'settled':>9}{'peak MiB':>10}{'plan MiB':>10}{'plan/peak':>10}"
    )
    print(
        "# run s: rbplab run's wall time (planning, weights, scoring, shard writes); score s: its scoring\n"
        "# time; bare s: a bare forward over the same windows (warm); settled: rows settled in float64\n"
        "# (manifest); peak: GPU memory allocated during the run (weights included); plan: rbplab\n"
        "# plan's estimate"
    )
    ok = True
    shapes = [("micro-1-25K", "float32")] if smoke else list(END_TO_END)
    with tempfile.TemporaryDirectory() as tmp:
        for name, dtype in shapes:
            label = f"{name} {dtype}"
            try:
                if smoke:  # on a CPU: the fused kernel interpreted (TRITON_INTERPRET=1), float32
                    folder = ROOT / "data" / "models" / name
                    settings = dict(
                        dtype=dtype, device="cpu", head="fused", max_tokens=tokens, context_length=128
                    )
                else:
                    folder = write_model(name, dtype, Path(tmp) / f"{name}-{dtype}")
                    settings = dict(
                        dtype=dtype, device="cuda", head="auto", max_tokens=tokens, context_length=2048
                    )
                cache = Path(tmp) / f"cache-{name}-{dtype}"
                grid = Grid.from_names([str(folder)], ["prose"], **settings)
                estimate = estimate_costs(grid, cache, probe=False).table["memory_bytes"].iloc[0]
                cuda = settings["device"] == "cuda"
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                run = run_study(grid, cache_dir=cache, progress=False)
                peak = torch.cuda.max_memory_allocated() - base if cuda else None
                if not run.ok:
                    raise RuntimeError("; ".join(run.failures))
                key = run.table["key"].iloc[0]
                manifest = CacheEntry.open(key, cache).manifest()
                provenance = manifest["provenance"]
                n_tokens = int(manifest["n_tokens"])
                settled = 100.0 * provenance["settled_rows"] / max(n_tokens, 1)
                bare = bare_seconds(folder, settings)
                score = run.timings.get("score", float("nan"))
                head = "+".join(provenance["heads"])
                peak_text = f"{peak / 2**20:>10,.0f}" if peak is not None else f"{'-':>10}"
                ratio = f"{int(estimate) / peak:>9.2f}x" if peak else f"{'-':>10}"
                print(
                    f"{label:<24}{head:<7}{n_tokens:>8,}{run.seconds:>8.1f}{score:>9.2f}{bare:>8.2f}"
                    f"{run.seconds / bare:>8.2f}x{score / bare:>10.2f}x{settled:>8.2f}%{peak_text}"
                    f"{int(estimate) / 2**20:>10,.0f}{ratio}",
                    flush=True,
                )
            except Exception as err:  # noqa: BLE001 - one failed shape must not hide the others' figures
                ok = False
                print(
                    f"{label:<24}FAILED: {type(err).__name__}: {' '.join(str(err).split())[:300]}", flush=True
                )
            finally:
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    return ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default=None, help="the commit checked (the device has no .git)")
    p.add_argument("--exact-tokens", type=int, default=16_384, help="tokens per model in part (a)")
    p.add_argument(
        "--speed-tokens", type=int, default=bench_gpu.DEFAULT_TOKENS, help="tokens per model in (b)"
    )
    p.add_argument("--run-tokens", type=int, default=131_072, help="tokens per model in part (d)")
    p.add_argument("--chunk-rows", nargs="*", type=int, default=[1024, 4096], help="(c): fp32 chunks to try")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds one speed run may take")
    p.add_argument("--parts", default="abcd", help="which parts to run (a, bc, d)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="parts (a) and (d) on micro-1-25K only, on the CPU under TRITON_INTERPRET=1 (keeps this "
        "script working)",
    )
    args = p.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False); --smoke runs on a CPU")
    print(versions(args.commit), flush=True)
    started = time.perf_counter()
    if args.smoke:
        args.parts = "ad"
    ok = part_a(args.exact_tokens, args.smoke) if "a" in args.parts else True
    if "b" in args.parts:
        ok &= part_bc(args.speed_tokens, args.chunk_rows, args.timeout)
    if "d" in args.parts:
        ok &= part_d(args.run_tokens if not args.smoke else args.exact_tokens, args.smoke)
    verdict = "all parts ran" if ok else "SOME PARTS FAILED"
    print(f"\n# {time.perf_counter() - started:.0f} s in all; {verdict}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
