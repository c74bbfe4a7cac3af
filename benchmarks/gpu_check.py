"""The GPU check: is rbplab exact and fast on a GPU? One command, sized for under 8 minutes on one
H100 (195-214 s on an H200, 2026-11-28), no network. Whoever is lent a GPU runs it first and commits
its output under benchmarks/results/.

    PYTHONPATH=. python3 benchmarks/gpu_check.py --commit $(git rev-parse --short HEAD) \\
        | tee benchmarks/results/gpu_check-$(date +%F).txt

It prints, with the date, the GPU, the versions and the commit:
(a) exactness of the fp32 head and the fused head against a float64 reference, on the GPU: the
    micro-suite models (data/models, bundled prose corpus; float32 and bfloat16 bodies) and random
    models shaped like GPT-2 small and Qwen2.5-0.5B (bfloat16; synthetic ids). Both heads rank the
    same hidden states; the reference multiplies them with the head in float64. Per model and head:
    % of tokens whose (n_greater, n_equal) equal the reference's, the largest gap |z_v - z_t| among
    the differing tokens' reordered pairs relative to |z_t| and to |h| |w_t| (the scale of float32
    summation error: a gap below 2**-24 = 6.0e-8 of it is a near-tie that float32 rounding of the
    d products decides, anything larger a bug; near zero, |z_t| is no scale), the largest
    |nll - nll_64|, and certificate failures
    (calls the fused head refused because a target logit was not bit-identical to its in-tile value);
(b) speed: bare bf16 forward vs fp32 head vs fused head, GPT-2 small, Qwen2.5-0.5B and -7B shapes,
    context 2,048, 262,144 scored tokens each (benchmarks/bench_gpu.py: tok/s, ratio to the bare
    forward, peak memory with the fp32 head's copy);
(c) the fp32 head's GPU chunk size tried at 2-3 sizes (Qwen2.5-0.5B shape).
Exit status 1 if any part failed to run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path

import bench_gpu
import torch

ROOT = Path(__file__).resolve().parents[1]
MAX_GAP_ROWS = 500  # differing rows whose gaps are measured, per model and head
MICRO = ("micro-1-25K", "micro-2-85K", "micro-3-200K", "micro-4-559K", "micro-5-1.2M", "micro-6-2.7M")


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


def float64_ranks(hidden: torch.Tensor, head, targets: torch.Tensor, vocab: int, rows: int = 512):
    """Per block of rows: (start, n_greater, n_equal, nll, logits, target logits), all in float64."""
    w = head.weight[:vocab].double()
    b = None if getattr(head, "bias", None) is None else head.bias[:vocab].double()
    for start in range(0, hidden.shape[0], rows):
        z = hidden[start : start + rows].double() @ w.T
        if b is not None:
            z += b
        z_t = z.gather(1, targets[start : start + rows, None].long())
        yield start, (z > z_t).sum(1), (z == z_t).sum(1), torch.logsumexp(z, 1) - z_t[:, 0], z, z_t


def reordered_gap(
    z: torch.Tensor, z_t: torch.Tensor, target: int, k: int, scale: float
) -> tuple[float, float]:
    """A row whose counts differ from float64's by k reordered at least k logits against z_t, so its
    largest reordered gap is at least the k-th smallest |z_v - z_t| over v != t (float64 logits z of
    the row): that bound relative to |z_t| and to `scale` (|h| |w_t|, float32 summation's scale)."""
    gap = (z - z_t).abs()
    gap[target] = float("inf")
    kth = float(gap.kthvalue(max(k, 1)).values)
    return kth / max(float(z_t.abs()), 1e-30), kth / max(scale, 1e-30)


def exactness(label: str, scorer, batches: list, vocab: int) -> list[str]:
    """Both heads against float64 on the hidden states of `batches`; one line per head."""
    from rbplab.extraction.fused_head import FusedHead, HeadCertificateError, fused_rank_stats
    from rbplab.extraction.ranks import rank_stats
    from rbplab.extraction.precision import pinned_precision

    fused_head = FusedHead.from_module(scorer.model.get_output_embeddings(), vocab)
    w_norms = scorer.head.weight[:vocab].double().norm(dim=1)
    tally = {
        h: {"tokens": 0, "exact": 0, "differ": 0, "gaps": [], "scaled": [], "nll": 0.0, "certificate": 0}
        for h in ("fp32", "fused")
    }
    for t in tally.values():
        t["seconds"] = 0.0
    with torch.inference_mode(), pinned_precision():
        for length, group in batches:
            hidden, targets = scorer.hidden_states(length, group)
            results = {}
            for head in ("fp32", "fused"):
                bench_gpu._sync(hidden.device)
                started = time.perf_counter()
                try:
                    if head == "fp32":
                        results[head] = rank_stats(hidden, scorer.head, targets, vocab_size=vocab)
                    else:
                        results[head] = fused_rank_stats(hidden, fused_head, targets, vocab_size=vocab)
                except HeadCertificateError:
                    tally[head]["certificate"] += 1
                bench_gpu._sync(hidden.device)
                tally[head]["seconds"] += time.perf_counter() - started
            for start, g64, e64, nll64, z, z_t in float64_ranks(hidden, scorer.head, targets, vocab):
                rows = slice(start, start + len(g64))
                for head, (g, e, nll) in results.items():
                    t = tally[head]
                    dg, de = (g[rows].long() - g64).abs(), (e[rows].long() - e64).abs()
                    same = (dg == 0) & (de == 0)
                    t["tokens"] += len(g64)
                    t["exact"] += int(same.sum())
                    t["differ"] += int((~same).sum())
                    t["nll"] = max(t["nll"], float((nll[rows].double() - nll64).abs().max()))
                    # Gaps of the first rows that differ (their number is counted whole).
                    for r in (~same).nonzero()[:, 0].tolist()[: max(0, MAX_GAP_ROWS - len(t["gaps"]))]:
                        target = int(targets[start + r])
                        scale = float(hidden[start + r].double().norm() * w_norms[target])
                        k = int(max(dg[r], de[r]))
                        relative, scaled = reordered_gap(z[r], z_t[r], target, k, scale)
                        t["gaps"].append(relative)
                        t["scaled"].append(scaled)
    lines = []
    for head, t in tally.items():
        exact = 100.0 * t["exact"] / max(t["tokens"], 1)
        worst = f"{max(t['gaps']):.1e}" if t["gaps"] else "-"
        scaled = f"{max(t['scaled']):.1e}" if t["scaled"] else "-"
        lines.append(
            f"{label:<26}{head:<7}{t['tokens']:>8,}{exact:>10.4f}%{t['differ']:>8}{worst:>11}{scaled:>12}"
            f"{t['nll']:>12.2e}{t['certificate']:>6}{t['seconds']:>9.2f}"
        )
    return lines


def micro_batches(name: str, dtype: str, tokens: int):
    from rbplab.extraction.plan import plan_extraction
    from rbplab.extraction.scoring import batches, make_scorer
    from rbplab.extraction.weights import load_weights

    plan = plan_extraction(str(ROOT / "data" / "models" / name), "prose", max_tokens=tokens, dtype=dtype)
    scorer = make_scorer(plan, load_weights(plan.described))
    windows = [w for shard in plan.shards for w in shard]
    return scorer, list(batches(windows, 16_384, plan.policy.context_length)), plan.vocab_size


def random_batches(name: str, tokens: int):
    from rbplab.extraction.scoring import Scorer

    model = bench_gpu.build_model(name, 2048, torch.device("cuda"), torch.bfloat16)
    vocab = model.config.vocab_size
    scorer = Scorer(model, vocab, 0)
    return scorer, bench_gpu.synthetic_batches(vocab, 2048, tokens, 16_384), vocab


def part_a(tokens: int, smoke: bool = False) -> bool:
    print("\n## (a) exactness against float64 (hidden states of the model's own body)")
    print(
        f"{'model':<26}{'head':<7}{'tokens':>8}{'exact':>11}{'differ':>8}{'gap/|z_t|':>11}{'gap/|h||w|':>12}"
        f"{'max |dnll|':>12}{'cert':>6}{'head s':>9}"
    )
    print(
        "# differ: tokens whose (n_greater, n_equal) differ from float64; gap: the largest, over them,\n"
        "# of the k-th smallest |z_v - z_t| (k = the count difference), a lower bound on the gaps they\n"
        "# reordered, relative to |z_t| and to |h| |w_t| (below 2**-24 = 6.0e-8 of |h| |w_t|: float32\n"
        "# rounding of a near-tie); cert: calls the fused head refused (certificate); head s: seconds"
    )
    ok = True
    runs = [
        (f"{m} {d}", lambda m=m, d=d: micro_batches(m, d, tokens))
        for m in MICRO
        for d in ("float32", "bfloat16")
    ]
    runs += [
        (f"{m} bfloat16 (random)", lambda m=m: random_batches(m, tokens)) for m in ("gpt2", "qwen2.5-0.5b")
    ]
    for label, make in runs[:1] if smoke else runs:
        try:
            scorer, batches, vocab = make()
            for line in exactness(label, scorer, batches, vocab):
                print(line, flush=True)
            del scorer
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception as err:  # noqa: BLE001 - one failed model must not hide the others' figures
            ok = False
            print(f"{label:<26}FAILED: {type(err).__name__}: {' '.join(str(err).split())[:300]}", flush=True)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default=None, help="the commit checked (the device has no .git)")
    p.add_argument("--exact-tokens", type=int, default=16_384, help="tokens per model in part (a)")
    p.add_argument(
        "--speed-tokens", type=int, default=bench_gpu.DEFAULT_TOKENS, help="tokens per model in (b)"
    )
    p.add_argument("--chunk-rows", nargs="*", type=int, default=[1024, 4096], help="(c): fp32 chunks to try")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds one speed run may take")
    p.add_argument("--parts", default="abc", help="which parts to run (a, bc)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="part (a) on micro-1-25K only, on the CPU under TRITON_INTERPRET=1 (keeps this script working)",
    )
    args = p.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False); --smoke runs on a CPU")
    print(versions(args.commit), flush=True)
    started = time.perf_counter()
    if args.smoke:
        args.parts = "a"
    ok = part_a(args.exact_tokens, args.smoke) if "a" in args.parts else True
    if "b" in args.parts:
        ok &= part_bc(args.speed_tokens, args.chunk_rows, args.timeout)
    verdict = "all parts ran" if ok else "SOME PARTS FAILED"
    print(f"\n# {time.perf_counter() - started:.0f} s in all; {verdict}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
