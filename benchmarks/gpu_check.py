"""The GPU check: is rbplab exact and fast on a GPU, end to end? One prepared command, sized for
under 8 minutes on one H100 or H200, no network. Whoever is lent a GPU runs it before anything else
and commits its output under benchmarks/results/; the docs quote what it prints (the one source of
the device's bound ratios and of the speed ratios):

    PYTHONPATH=. python3 benchmarks/gpu_check.py --commit $(git rev-parse --short HEAD) \\
        | tee benchmarks/results/gpu_check-$(date +%F).txt

It prints the date, the GPU, the versions and the commit, then five parts ((e) first: it takes
well under a minute and is the figure the fused head's bound rests on, so it is in the file even if
a later part is cut short):

(e) the tensor-core bound measured on this device. The fused head's counts are exact only if every
    logit the kernel computes lies within E = gamma_{d+2}(u') sum_k |h_k w_vk| (+ an underflow
    term) of its exact value, with u' from a model of the MMA's accumulation (`exact.
    tensor_core_unit`: no public measurement covers Hopper's bf16 wgmma or Blackwell). For
    bfloat16, float16 and float32 (IEEE dot, u' = u), on rows built to make the bound tight
    (`aligned_inputs`: the head row carries the state's signs, so no product cancels; one large
    product first, then d - 1 just under half an ulp, just under one ulp or of random size, or d
    equal products), d from 64 to 4,096, each row's target its own aligned row: per dtype and
    input family, the largest |z_t kernel - z_t exact| / E by d (`exact.target_logit_ratios`, on
    the z_t the kernel handed its run-time check), the u'/u used, the u'/u the device needed (exact
    z_t by math.fsum), the calls the run-time check refused and whether the counts equal exact
    arithmetic's; then one verdict line per dtype with the compute capability. A ratio above 1 is
    a FAILED line and exit status 1. Then the fused head's nll against float64 on random heads,
    plain and softcapped (the kernel's tanh, division and exp2 as the device runs them);
(a) exactness against exact arithmetic, per model shape and head, on the GPU: the micro-suite
    models (data/models, bundled prose corpus; float32 and bfloat16 bodies) and random models shaped
    like GPT-2 small (bfloat16 and float16), Qwen2.5-0.5B (bfloat16) and Gemma-2-2B's head
    (|V| 256,000, softcap 30, on 2 layers; bfloat16), on synthetic ids. Both heads rank the same
    hidden states. The reference (`exact_reference`) counts on raw logits, as rbplab does (a
    softcap keeps the order of the logits): float64 decides each pair where |z_v - z_t| exceeds
    float64's own error bound, integer arithmetic the rest; its nll is float64 with the softcap.
    Per model and head: % of tokens whose (n_greater, n_equal) equal exact arithmetic's, % of rows
    the head settled by exact sign (a logit inside the error band of `rbplab.extraction.exact`),
    the largest |nll - nll_64|, the calls the run-time check refused (HeadCertificateError), batch
    invariance (the same rows ranked again reversed, in two calls, give the same counts), the
    head's seconds and the pairs the reference settled in integers;
(b) speed: bare bf16 forward vs fp32 head vs fused head, GPT-2 small, Qwen2.5-0.5B and -7B shapes,
    context 2,048, 262,144 scored tokens each (benchmarks/bench_gpu.py: tok/s, ratio to the bare
    forward, peak memory with the fp32 head's copy, rows settled);
(c) the fp32 head's GPU chunk size tried at 2-3 sizes (Qwen2.5-0.5B shape);
(d) end to end: random models of those shapes written to disk (with the micro-suite's tokenizer),
    then `rbplab run` of a study of each on the prose corpus on CUDA (head "auto": the fused kernel
    for a half-precision body), beside a bare forward over the same windows: the run's wall time and
    scoring time against the bare forward's, rows settled (from the entry's manifest), and the peak
    GPU memory against `rbplab plan`'s estimate.
Exit status 1 if any part failed to run, a bound ratio exceeded 1, or a count differed in (e).

`--smoke` keeps the script working on a CPU (TRITON_INTERPRET=1, the kernel through Triton's
interpreter): (e) on float16 and float32 at d 64 and 256 (the interpreter cannot multiply
bfloat16), (a) and (d) on micro-1-25K. tests/extraction/test_gpu_check.py runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
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


def failure(err: Exception) -> str:
    """One line for a part that failed: FAILED, the error's type and its message on one line."""
    return f"FAILED: {type(err).__name__}: {' '.join(str(err).split())[:300]}"


def rational_sign(h: list[float], w_v: list[float], w_t: list[float], b_v: float, b_t: float) -> int:
    """The exact sign of z_v - z_t = sum_k h_k (w_vk - w_tk) + b_v - b_t, in integer arithmetic:
    each float is an integer over a power of two (`as_integer_ratio`), so every product is one too
    and their sum over the largest denominator is exact. Independent of rbplab's settling."""
    terms = [b_v.as_integer_ratio(), (-b_t).as_integer_ratio()]
    for hk, a, c in zip(h, w_v, w_t, strict=True):
        num, den = hk.as_integer_ratio()
        for x in (a, -c):
            xn, xd = x.as_integer_ratio()
            terms.append((num * xn, den * xd))
    scale = max(den for _, den in terms)
    total = sum(num * (scale // den) for num, den in terms)
    return (total > 0) - (total < 0)


def exact_reference(hidden: torch.Tensor, head, targets: torch.Tensor, vocab: int, softcap, rows: int = 256):
    """Per block of rows: (start, n_greater, n_equal, nll, pairs settled by integers), the counts
    of real arithmetic on raw logits (no softcap: it keeps the order), the nll in float64 with the
    softcap. Float64 decides a pair where |z_v - z_t| exceeds its own error bound, doubled (each
    logit within gamma_{d+2}(2^-53) of its sum of |terms|, itself computed to that; the products
    of float32 values are exact in float64); `rational_sign` decides the rest. A target against
    itself is a tie without arithmetic."""
    w = head.weight[:vocab].double()
    w_abs = w.abs()
    b = torch.zeros(vocab, dtype=torch.float64, device=w.device)
    if getattr(head, "bias", None) is not None:
        b = head.bias[:vocab].double()
    n = hidden.shape[1] + 2
    doubt_factor = 2 * n * 2.0**-53 / (1 - n * 2.0**-53)
    for start in range(0, hidden.shape[0], rows):
        h = hidden[start : start + rows].double()
        t = targets[start : start + rows, None].long()
        z = h @ w.T + b
        size = h.abs() @ w_abs.T + b.abs()
        gap = z - z.gather(1, t)
        sign = gap.sign()
        doubt = gap.abs() <= doubt_factor * (size + size.gather(1, t))
        sign.scatter_(1, t, 0.0)
        doubt.scatter_(1, t, False)
        undecided = doubt.nonzero().tolist()
        for i, v in undecided:
            tv = int(t[i])
            sign[i, v] = rational_sign(
                h[i].tolist(), w[v].tolist(), w[tv].tolist(), float(b[v]), float(b[tv])
            )
        if softcap:
            z = torch.tanh(z / softcap) * softcap
        nll = torch.logsumexp(z, 1) - z.gather(1, t)[:, 0]
        yield start, (sign > 0).sum(1), (sign == 0).sum(1), nll, len(undecided)


def against_exact(results: dict, hidden: torch.Tensor, head, targets: torch.Tensor, vocab: int, softcap):
    """Each head's (n_greater, n_equal, nll) in `results` (by name) against `exact_reference`:
    ({name: (rows whose counts equal exact arithmetic's, max |nll - nll_64|)}, pairs the reference
    settled in integer arithmetic)."""
    tally = {name: [0, 0.0] for name in results}
    rational = 0
    for start, greater, equal, nll64, settled in exact_reference(hidden, head, targets, vocab, softcap):
        rational += settled
        rows = slice(start, start + len(greater))
        for name, (g, e, nll) in results.items():
            same = (g[rows].long() == greater) & (e[rows].long() == equal)
            tally[name][0] += int(same.sum())
            tally[name][1] = max(tally[name][1], float((nll[rows].double() - nll64).abs().max()))
    return {name: tuple(t) for name, t in tally.items()}, rational


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
    """Both heads against exact arithmetic on the hidden states of `batches`; one line per head."""
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
        h: {"tokens": 0, "exact": 0, "nll": 0.0, "refused": 0, "seconds": 0.0, "invariant": True}
        for h in heads
    }
    rational = 0
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
                    tally[name]["refused"] += 1
                bench_gpu._sync(hidden.device)
                tally[name]["seconds"] += time.perf_counter() - started
                if b == 0 and name in results:
                    tally[name]["invariant"] = batch_invariant(head, hidden, targets, results[name])
            compared, settled = against_exact(results, hidden, scorer.head.module, targets, vocab, softcap)
            rational += settled
            for name, (same, dnll) in compared.items():
                t = tally[name]
                t["tokens"] += len(targets)
                t["exact"] += same
                t["nll"] = max(t["nll"], dnll)
    lines = []
    for name, t in tally.items():
        exact = 100.0 * t["exact"] / max(t["tokens"], 1)
        settled = 100.0 * heads[name].tally.settled / max(heads[name].tally.rows, 1)
        lines.append(
            f"{label:<30}{name:<7}{t['tokens']:>8,}{exact:>10.4f}%{t['tokens'] - t['exact']:>8}"
            f"{settled:>9.2f}%{t['nll']:>12.2e}{t['refused']:>6}{'yes' if t['invariant'] else 'NO':>6}"
            f"{t['seconds']:>9.2f}{rational:>7}"
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
    print("\n## (a) exactness against exact arithmetic (hidden states of the model's own body)")
    print(
        f"{'model':<30}{'head':<7}{'tokens':>8}{'exact':>11}{'differ':>8}{'settled':>10}{'max |dnll|':>12}"
        f"{'cert':>6}{'b.inv':>6}{'head s':>9}{'rat.':>7}"
    )
    print(
        "# exact: tokens whose (n_greater, n_equal) equal those of exact arithmetic on the raw logits\n"
        "# (differ: the others; the aim: 0); settled: rows with a logit inside their error band, settled\n"
        "# by exact sign; max |dnll|: against float64 with the softcap; cert: calls the run-time check\n"
        "# refused (HeadCertificateError: a target logit outside its bound); b.inv: the first batch's\n"
        "# rows ranked again reversed and in two calls give the same counts; head s: the head's seconds;\n"
        "# rat.: pairs the reference settled in integer arithmetic (float64 too close to call)"
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
            print(f"{label:<30}{failure(err)}", flush=True)
    return ok


E_DIMS = (64, 256, 1024, 4096)
E_DIMS_SMOKE = (64, 256)  # the interpreter multiplies a half tile in ~50 ms: d 4096 is the GPU's
E_FAMILIES = ("half-ulp tail", "ulp tail", "random tail", "equal")
MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def aligned_inputs(family: str, dtype: torch.dtype, d: int, rows: int, seed: int) -> tuple:
    """(h, w): [rows, d] float64 values, each exact in `dtype`, built to make the accumulation
    bound tight. Row i of w (row i's target) carries the signs of row i of h, so all d products
    h_k w_k are positive: nothing cancels, and the error can approach gamma_{d+2}(u') sum|h_k w_k|.

    Every family but "equal" puts one large product first in the K loop: the partial sum is then
    as large as the whole sum from the first step, so each later product can lose ~u of the whole
    (a large term per MMA block instead would keep early partial sums small). The large product is
    1 + (i mod 128) / 128 for row i, so that other rows' logits stay out of row i's band. Then:
    - "half-ulp tail": d - 1 products just under 2**-24, half an ulp of the sum: rounding to
      nearest drops each whole, ~u of the sum each;
    - "ulp tail": d - 1 products just under 2**-23, one ulp: what truncating alignment (tensor
      cores in Fasi, Higham, Mikaitis, Pranesh 2021) drops whole, ~2u each;
    - "random tail": d - 1 products of random significands from 2**-26 to 2**-22, for alignment
      with a few guard bits;
    - "equal": d equal products, the largest significand below 2 squared (every bit set).
    """
    g = torch.Generator().manual_seed(seed)
    steps = 2 ** MANTISSA_BITS[dtype]
    top = 2.0 - 1.0 / steps  # the largest significand below 2

    def significands() -> torch.Tensor:
        return 1 + torch.randint(0, steps, (rows, d), generator=g, dtype=torch.float64) / steps

    tails = {
        "half-ulp tail": (torch.full((rows, d), top * 2.0**-13), torch.full((rows, d), 2.0**-12)),
        "ulp tail": (torch.full((rows, d), top * 2.0**-12), torch.full((rows, d), 2.0**-12)),
        "random tail": (
            significands() * 2.0 ** -(12 + torch.randint(0, 3, (rows, d), generator=g)).double(),
            significands() * 2.0**-12,
        ),
        "equal": (torch.full((rows, d), top), torch.full((rows, d), top)),
    }
    mag_h, mag_w = (x.double() for x in tails[family])
    if family != "equal":
        mag_h[:, 0] = 1.0
        mag_w[:, 0] = 1 + (torch.arange(rows) % 128).double() / 128
    sign = torch.randint(0, 2, (rows, d), generator=g).double() * 2 - 1
    h, w = sign * mag_h, sign * mag_w
    for x in (h, w):
        if not torch.equal(x.to(dtype).double(), x):
            raise AssertionError(f"the {family} inputs are not exact in {dtype}")
    return h, w


def kernel_target_logits(hidden: torch.Tensor, head, targets: torch.Tensor, vocab: int):
    """Run the fused head on (hidden, head, targets) and capture what its run-time check sees: the
    check's arguments (h, w, bias, targets, z_t, unit as the kernel used them), whether the check
    refused the call, and the head's result (None when refused)."""
    from rbplab.extraction import fused_head

    seen: dict = {}
    original = fused_head._check_target_logits

    def recorded(*args):
        seen["args"] = args
        original(*args)

    fused_head._check_target_logits = recorded
    try:
        result = fused_head.fused_rank_stats(hidden, head, targets, vocab_size=vocab)
        refused = False
    except fused_head.HeadCertificateError:
        result, refused = None, True
    finally:
        fused_head._check_target_logits = original
    return seen["args"][:6], refused, result


def bound_case(family: str, dtype: torch.dtype, d: int, rows: int, device: torch.device) -> dict:
    """The fused head on one family's aligned rows, each row's target its own head row: the
    largest ratio |z_kernel - z_exact| / E (`exact.target_logit_ratios`, what the run-time check
    computes), the same error measured independently (math.fsum of the exact float64 products,
    correctly rounded) as an effective u'/u, and whether the counts equal exact arithmetic's."""
    from rbplab.extraction.exact import UNIT, target_logit_ratios

    h64, w64 = aligned_inputs(family, dtype, d, rows, seed=d)
    head = torch.nn.Linear(d, rows, bias=False, dtype=dtype, device=device)
    with torch.no_grad():
        head.weight.copy_(w64.to(dtype))
    hidden = h64.to(dtype).to(device)
    targets = torch.arange(rows, device=device)
    (h, w, bias, t, z_t, unit), refused, result = kernel_target_logits(hidden, head, targets, rows)
    ratios = target_logit_ratios(h, w, bias, t, z_t, unit)
    products = (h64 * w64).tolist()  # exact: products of half or float32 values fit float64
    z_exact = torch.tensor([math.fsum(p) for p in products], dtype=torch.float64)
    size = (h64 * w64).abs().sum(1)
    error = (z_t.double().cpu() - z_exact).abs()
    counts = None
    if result is not None:
        compared, _ = against_exact({"fused": result}, hidden, head, targets, rows, None)
        counts = compared["fused"][0] == rows
    return {
        "ratio": float(ratios.max()),
        "seen": float((error / ((d + 2) * UNIT * size)).max()),
        "unit": unit / UNIT,
        "refused": refused,
        "counts": counts,
    }


def nll_case(dtype: torch.dtype, softcap, rows: int, vocab: int, d: int, device: torch.device) -> tuple:
    """(max |nll - nll_64|, counts equal exact arithmetic's) of the fused head on random states and
    a random head whose logits spread over about +-40 (past a softcap of 30), targets at random."""
    from rbplab.extraction.fused_head import fused_rank_stats

    g = torch.Generator().manual_seed(vocab + d)
    hidden = torch.randn(rows, d, generator=g).to(dtype).to(device)
    head = torch.nn.Linear(d, vocab, bias=False, dtype=dtype, device=device)
    with torch.no_grad():
        head.weight.copy_((torch.randn(vocab, d, generator=g) * 12 / math.sqrt(d)).to(dtype))
    targets = torch.randint(0, vocab, (rows,), generator=g).to(device)
    result = fused_rank_stats(hidden, head, targets, vocab_size=vocab, softcap=softcap)
    compared, _ = against_exact({"fused": result}, hidden, head, targets, vocab, softcap)
    same, dnll = compared["fused"]
    return dnll, same == rows


def bound_rows(dtype: torch.dtype, dims: tuple, rows: int, device: torch.device, capability: str) -> bool:
    """One line per input family and a verdict line for `dtype`; False when a ratio exceeds 1 (a
    FAILED line), the run-time check's refusals disagree with the ratios, or a count differs."""
    name = str(dtype).removeprefix("torch.")
    ok, worst, unit = True, (0.0, "-", 0), float("nan")
    for family in E_FAMILIES:
        try:
            cases = [bound_case(family, dtype, d, rows, device) for d in dims]
        except Exception as err:  # noqa: BLE001 - one failed family must not hide the others
            print(f"{name:<10}{family:<15}{failure(err)}", flush=True)
            ok = False
            continue
        unit = cases[0]["unit"]
        counts = [c["counts"] for c in cases if c["counts"] is not None]
        print(
            f"{name:<10}{family:<15}{rows:>5}{unit:>5.2f}u  "
            + "".join(f"{c['ratio']:>9.4f}" for c in cases)
            + f"{max(c['seen'] for c in cases):>9.4f}{sum(c['refused'] for c in cases):>8}"
            + f"{('exact' if all(counts) else 'DIFFER') if counts else '-':>8}",
            flush=True,
        )
        for d, c in zip(dims, cases, strict=True):
            worst = max(worst, (c["ratio"], family, d))
            if (c["ratio"] > 1) != c["refused"] or c["counts"] is False:
                print(f"{name:<10}{family:<15}FAILED at d={d}: the run-time check or the counts disagree")
                ok = False
    ratio, family, d = worst
    holds = ratio <= 1
    print(
        f"bound {name}: max ratio {ratio:.4f} {'<=' if holds else '>'} 1 (at {family}, d={d}; "
        f"u' = {unit:.2f}u; compute capability {capability})"
        + ("" if holds else " FAILED: the kernel's error exceeds its bound on this device"),
        flush=True,
    )
    return ok and holds


def part_e(smoke: bool = False) -> bool:
    """The accumulation bound measured on this device, then the nll against float64; False when
    a ratio exceeds 1, the run-time check disagrees with the ratios, or a count differs from exact
    arithmetic's. `smoke`: on the CPU through Triton's interpreter (no bfloat16 there), smaller."""
    device = torch.device("cuda" if torch.cuda.is_available() and not smoke else "cpu")
    if device.type == "cuda":
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
    else:
        capability = "none (Triton's interpreter on the CPU)"
    rows, dims = (128, E_DIMS_SMOKE) if smoke else (256, E_DIMS)
    print(f"\n## (e) the tensor-core bound measured on this device (compute capability {capability})")
    print(
        f"{'dtype':<10}{'inputs':<15}{'rows':>5}{'unit':>6}  "
        + "".join(f"{f'd={d}':>9}" for d in dims)
        + f"{'u seen':>9}{'refused':>8}{'counts':>8}"
    )
    print(
        "# d=...: the largest ratio over rows of |z_t - z_t exact| / E, the kernel's target logit\n"
        "# against its bound E = gamma_{d+2}(u') sum|h_k w_k| + underflow term (exact.target_logit_ratios,\n"
        "# what the run-time check computes; must be <= 1); unit: the kernel's u'/u; u seen: the largest\n"
        "# |z_t - z_t exact| / ((d+2) u sum|h_k w_k|), z_t exact by math.fsum: the u'/u this device\n"
        "# needed; refused: calls the run-time check refused; counts: equal exact arithmetic's"
    )
    dtypes = [torch.bfloat16, torch.float16, torch.float32]
    if device.type != "cuda":
        print("# bfloat16 skipped: Triton's interpreter multiplies bfloat16 tiles as raw bit patterns")
        dtypes = dtypes[1:]
    ok = True
    with torch.inference_mode():
        for dtype in dtypes:
            ok &= bound_rows(dtype, dims, rows, device, capability)
        vocab, d = (512, 128) if smoke else (32_768, 1024)
        print(f"{'dtype':<10}{'head':<15}{'rows':>5}{'|V|':>8}{'d':>6}{'max |dnll|':>12}{'counts':>8}")
        print(
            "# the fused head's nll against float64 with the softcap (logits over about +-40, past the\n"
            "# cap of 30: the kernel's tanh, division and exp2 as this device runs them; float32 logits\n"
            "# of magnitude 32-64 are 4e-6 apart); counts: equal exact arithmetic's"
        )
        for dtype, softcap in [(dtype, cap) for dtype in dtypes for cap in (None, 30.0)]:
            label = f"{str(dtype).removeprefix('torch.'):<10}{'softcap 30' if softcap else 'plain':<15}"
            try:
                dnll, same = nll_case(dtype, softcap, rows, vocab, d, device)
            except Exception as err:  # noqa: BLE001 - one failed head must not hide the others
                print(f"{label}{failure(err)}", flush=True)
                ok = False
                continue
            ok &= same
            print(
                f"{label}{rows:>5}{vocab:>8,}{d:>6}{dnll:>12.2e}{'exact' if same else 'DIFFER':>8}",
                flush=True,
            )
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
        "# time; bare s: a bare forward over the same windows (warm); settled: rows settled by exact sign\n"
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
                print(f"{label:<24}{failure(err)}", flush=True)
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
    p.add_argument("--parts", default="eabcd", help="which parts to run (e, a, bc, d; e runs first)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="parts (e) (float16 and float32), (a) and (d) on micro-1-25K only, on the CPU under "
        "TRITON_INTERPRET=1 (keeps this script working)",
    )
    args = p.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False); --smoke runs on a CPU")
    print(versions(args.commit), flush=True)
    started = time.perf_counter()
    if args.smoke:
        args.parts = "ead"
    ok = part_e(args.smoke) if "e" in args.parts else True
    if "a" in args.parts:
        ok &= part_a(args.exact_tokens, args.smoke)
    if "b" in args.parts:
        ok &= part_bc(args.speed_tokens, args.chunk_rows, args.timeout)
    if "d" in args.parts:
        ok &= part_d(args.run_tokens if not args.smoke else args.exact_tokens, args.smoke)
    verdict = "all parts ran" if ok else "SOME PARTS FAILED"
    print(f"\n# {time.perf_counter() - started:.0f} s in all; {verdict}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
