"""Which fused-head kernel: its accumulation and tiles, exactness and speed side by side, on a GPU.

    PYTHONPATH=. python3 benchmarks/gpu_head_variants.py --commit $(git rev-parse --short HEAD)

The first GPU check (benchmarks/results/gpu_check-2026-11-28.txt, H200) found the fused head fast
at Qwen2.5-7B (1.02x a bare bf16 forward) but 1.33x at Qwen2.5-0.5B, where the epilogue (counts,
exp-sum, certificate: CUDA-core work on every logit) costs as much as the tile products; and, on
random bf16 models, logits reordered up to 1.2e-4 apart relative to |z_t| (the fp32 head: 8.1e-6).
This script measures, on the same hidden states:
(a) exactness against float64 for the fp32 head and each variant: tokens whose (n_greater, n_equal)
    differ, and the largest reordered gap two ways: relative to |z_t| (as gpu_check prints it) and
    relative to |h| |w_t|, the scale of float32 summation error (summing d products in any order
    stays within about d * 2**-24 of it, printed as "fp32 bound"; near zero, |z_t| is no scale);
(b) speed of the head alone on the body's own hidden states (16,384 rows a call), beside the body's
    forward and a bare bf16 forward of the same batches, at GPT-2 small, Qwen2.5-0.5B and -7B shapes
    (random weights): "x bare" = (body + head) / bare forward.
Variants: this kernel with tiles BLOCK_N x BLOCK_V and s pipeline stages (8 warps), and with
--baseline another fused_head.py (the kernel at an earlier commit) run beside it.
`--smoke` runs both parts small on the CPU under TRITON_INTERPRET=1 (keeps this script working).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import bench_gpu
import gpu_check
import torch

VARIANTS = {"128x256 s3": (256, 3), "128x128 s3": (128, 3), "128x256 s4": (256, 4)}  # BLOCK_V, stages
BASELINE = "baseline 128x128 s3"
modules: dict = {}  # label: the fused-head module it runs


def use(variant: str):
    """The fused_rank_stats of `variant`, its module's tiles set."""
    from rbplab.extraction import fused_head

    module = modules.get(variant, fused_head)
    block_v, stages = VARIANTS.get(variant, (128, 3))
    module.BLOCK_V, module.NUM_STAGES = block_v, stages
    return module.fused_rank_stats


def load_baseline(path: str) -> None:
    """Another fused-head module (the kernel at an earlier commit, say), run beside this one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_fused_head", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    modules[BASELINE] = module


def heads(hidden, scorer, fhead, targets, vocab, variants):
    """{label: (n_greater, n_equal, nll) or the error's name} for the fp32 head and each variant."""
    from rbplab.extraction.ranks import rank_stats

    out = {"fp32 head": rank_stats(hidden, scorer.head, targets, vocab_size=vocab)}
    for v in variants:
        try:
            out[v] = use(v)(hidden, fhead, targets, vocab_size=vocab)
        except ArithmeticError as err:  # the certificate (HeadCertificateError) of either module
            out[v] = type(err).__name__
    return out


def part_a(runs, variants) -> None:
    from rbplab.extraction.fused_head import FusedHead
    from rbplab.extraction.precision import pinned_precision

    print("\n## (a) exactness against float64, same hidden states for every head")
    print(
        f"{'model':<28}{'head':<22}{'tokens':>8}{'differ':>8}{'gap/|z_t|':>11}{'gap/|h||w|':>12}"
        f"{'fp32 bound':>12}"
    )
    for label, make in runs:
        scorer, batches, vocab = make()
        fhead = FusedHead.from_module(scorer.model.get_output_embeddings(), vocab)
        w64 = scorer.head.weight[:vocab].double()
        bound = w64.shape[1] * 2.0**-24
        tally: dict = {}
        with torch.inference_mode(), pinned_precision():
            for length, group in batches:
                hidden, targets = scorer.hidden_states(length, group)
                results = heads(hidden, scorer, fhead, targets, vocab, variants)
                for start, g64, e64, _, z, z_t in gpu_check.float64_ranks(
                    hidden, scorer.head, targets, vocab
                ):
                    rows = slice(start, start + len(g64))
                    tg = targets[rows].long()
                    scale = hidden[rows].double().norm(dim=1) * w64[tg].norm(dim=1)
                    for head, result in results.items():
                        t = tally.setdefault(
                            head, {"tokens": 0, "differ": 0, "rel": 0.0, "scaled": 0.0, "cert": 0}
                        )
                        t["tokens"] += len(g64)
                        if isinstance(result, str):
                            t["cert"] += 1
                            continue
                        dg = (result[0][rows].long() - g64).abs()
                        de = (result[1][rows].long() - e64).abs()
                        for r in ((dg > 0) | (de > 0)).nonzero()[:, 0].tolist():
                            t["differ"] += 1
                            k = max(int(dg[r]), int(de[r]))
                            rel, scaled = gpu_check.reordered_gap(
                                z[r], z_t[r], int(tg[r]), k, float(scale[r])
                            )
                            t["rel"], t["scaled"] = max(t["rel"], rel), max(t["scaled"], scaled)
        for head, t in tally.items():
            rel = f"{t['rel']:.1e}" if t["differ"] else "-"
            scaled = f"{t['scaled']:.1e}" if t["differ"] else "-"
            cert = f"  {t['cert']} certificate failures" if t["cert"] else ""
            print(
                f"{label:<28}{head:<22}{t['tokens']:>8,}{t['differ']:>8}{rel:>11}{scaled:>12}{bound:>12.1e}{cert}"
            )
        sys.stdout.flush()
        del scorer, fhead, w64
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def timed(fn, device, repeat: int) -> float:
    """Seconds per call of fn(), after one warm-up call (compiles, allocator pools)."""
    fn()
    bench_gpu._sync(device)
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    bench_gpu._sync(device)
    return (time.perf_counter() - started) / repeat


def speed(name: str, variants, device, dtype, n_batches: int, batch_tokens: int, context: int):
    """Seconds per batch of the bare forward, the body and each variant's head; tokens per batch."""
    from rbplab.extraction.fused_head import FusedHead
    from rbplab.extraction.scoring import Scorer, batch_arrays

    model = bench_gpu.build_model(name, context, device, dtype)
    vocab = model.config.vocab_size
    groups = bench_gpu.synthetic_batches(vocab, context, n_batches * batch_tokens, batch_tokens)
    groups = groups[:n_batches]
    scorer = Scorer(model, vocab, 0)
    fhead = FusedHead.from_module(model.get_output_embeddings(), vocab)
    ids = [torch.from_numpy(batch_arrays(g, length, 0)[0]).to(device) for length, g in groups]
    states: list = []

    def body() -> None:
        states[:] = [scorer.hidden_states(length, g) for length, g in groups]

    with torch.inference_mode():
        seconds = {
            "bare forward": timed(lambda: [model(input_ids=x, use_cache=False) for x in ids], device, 2)
        }
        seconds["body (hidden states)"] = timed(body, device, 2)
        for v in variants:
            rank = use(v)
            seconds[v] = timed(
                lambda rank=rank: [rank(h, fhead, t, vocab_size=vocab) for h, t in states], device, 3
            )
    tokens = sum(w.n_scored for _, g in groups for w in g) / len(groups)
    n_params = sum(p.numel() for p in model.parameters())
    return {k: s / n_batches for k, s in seconds.items()}, tokens, n_params, vocab


def part_b(models, variants, device, dtype, n_batches: int, batch_tokens: int, context: int) -> None:
    print(f"\n## (b) speed: {n_batches} batches of {batch_tokens:,} tokens, context {context}, {dtype}")
    print(f"{'model':<14}{'what':<22}{'ms/batch':>10}{'tok/s':>12}{'x bare':>8}")
    for name in models:
        seconds, tokens, n_params, vocab = speed(
            name, variants, device, dtype, n_batches, batch_tokens, context
        )
        print(f"# {name}: {n_params / 1e6:,.0f}M parameters, |V| {vocab:,}")
        body = seconds["body (hidden states)"]
        for what, s in seconds.items():
            total = s if what in ("bare forward", "body (hidden states)") else s + body
            print(
                f"{name:<14}{what:<22}{1e3 * s:>10.2f}{tokens / s:>12,.0f}"
                f"{total / seconds['bare forward']:>7.2f}x",
                flush=True,
            )
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default=None, help="the commit measured (the device has no .git)")
    p.add_argument("--exact-tokens", type=int, default=16_384)
    p.add_argument("--batches", type=int, default=4, help="batches timed per model in (b)")
    p.add_argument(
        "--baseline", default=None, help="a fused_head.py to run beside this one (git show X:path)"
    )
    p.add_argument("--smoke", action="store_true", help="small, on the CPU under TRITON_INTERPRET=1")
    args = p.parse_args()
    if args.smoke and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("--smoke needs TRITON_INTERPRET=1 in the environment (read when Triton is imported)")
    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("gpu_head_variants needs a CUDA GPU; --smoke runs on a CPU under TRITON_INTERPRET=1")
    print(gpu_check.versions(args.commit), flush=True)
    extra = []
    if args.baseline:
        load_baseline(args.baseline)
        extra = [BASELINE]
        print(f"# {BASELINE}: {args.baseline}")
    started = time.perf_counter()
    if args.smoke:
        variants = list(VARIANTS)[:1] + extra
        part_a(
            [("micro-1-25K float32", lambda: gpu_check.micro_batches("micro-1-25K", "float32", 256))],
            variants,
        )
        part_b(["gpt2"], variants[:1], torch.device("cpu"), torch.float32, 1, 64, 64)
    else:
        variants = list(VARIANTS) + extra
        runs = [
            (f"{m} bfloat16", lambda m=m: gpu_check.micro_batches(m, "bfloat16", args.exact_tokens))
            for m in ("micro-3-200K", "micro-6-2.7M")
        ]
        runs += [
            (f"{m} bfloat16 (random)", lambda m=m: gpu_check.random_batches(m, args.exact_tokens))
            for m in ("gpt2", "qwen2.5-0.5b")
        ]
        part_a(runs, variants)
        part_b(
            list(bench_gpu.MODELS), variants, torch.device("cuda"), torch.bfloat16, args.batches, 16_384, 2048
        )
    print(
        f"\n# {time.perf_counter() - started:.0f} s in all; "
        f"fp32 bound = d * 2**-24 ({math.ldexp(1, -24):.1e} per term)"
    )


if __name__ == "__main__":
    main()
