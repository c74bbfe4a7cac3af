"""rbplab's rank extraction on a GPU against a bare half-precision forward: time and peak memory.

    PYTHONPATH=. python benchmarks/bench_gpu.py                                 # on a GPU machine
    PYTHONPATH=. python benchmarks/bench_gpu.py --device cpu --tokens 4096 --models gpt2   # a smoke run

Models, built in code with random weights (no hub access needed): GPT-2 small (124M, |V| = 50,257;
2,048 positions instead of GPT-2's 1,024 so that every model runs at the same context) and models
shaped like Qwen2.5-0.5B (|V| = 151,936, tied head) and Qwen2.5-7B (|V| = 152,064). Each runs on
--tokens scored tokens (default 262,144) of synthetic ids in windows of --context (default 2,048),
batched as rbplab batches them (`batches`, --batch-tokens padded tokens per forward).

Approaches, each in a fresh process (so peaks do not mix), timed after one warm-up batch:
- "bare forward": `model(input_ids, use_cache=False).logits`, the logits in the model's dtype
  (what evaluating a language model costs without ranks);
- "fp32 head": `Scorer.score` on every batch (base model forward, float32 head in chunks, exact
  greater/equal counts, nll) and one device-to-host copy per cache shard, as `extract` runs it,
  without the disk writes (they overlap scoring on a writer thread);
- "fp32 head, N rows" (--chunk-rows N ...): the same with the fp32 head's chunk forced to N rows;
- "fused head" (CUDA, with Triton): `Scorer(head="fused")`, the kernel of rbplab.extraction.fused_head;
- with --kv-cache, "fp32 head + KV cache": the body's forward called with use_cache=True, what rbplab
  did before 0.1.0's fix (a DynamicCache of every layer's keys and values, never read).

Peak memory is above the loaded weights, taken before the scorer is made, so the fp32 head's float32
copy of the head counts: on CUDA `torch.cuda.max_memory_allocated` after a reset, on CPU the RSS
high-water mark (VmHWM, reset through /proc/self/clear_refs). Time: wall clock with the device
synchronised. A child that fails, or runs past --timeout seconds, is reported as such (its exit code
or "timed out") and the next approach runs; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import queue as queues
import sys
import time
from typing import Any

import numpy as np
import torch

DEFAULT_TOKENS = 1 << 18  # 262,144 scored tokens per model


def model_config(name: str, context: int) -> Any:
    """The architecture of `name` (random weights are drawn from it), with `context` positions."""
    from transformers import Gemma2Config, GPT2Config, Qwen2Config

    if name == "gpt2":
        return GPT2Config(n_positions=max(context, 1024))  # GPT-2 small otherwise
    if name == "gemma2-head":  # Gemma-2-2B's head (|V| = 256,000, d = 2,304, softcap 30) on 2 layers
        return Gemma2Config(
            vocab_size=256_000,
            hidden_size=2_304,
            intermediate_size=9_216,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0,
            max_position_embeddings=max(context, 8_192),
        )
    qwen = {
        "qwen2.5-0.5b": dict(
            vocab_size=151_936,
            hidden_size=896,
            intermediate_size=4_864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        ),
        "qwen2.5-7b": dict(
            vocab_size=152_064,
            hidden_size=3_584,
            intermediate_size=18_944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            tie_word_embeddings=False,
        ),
    }[name]
    return Qwen2Config(
        **qwen, max_position_embeddings=max(context, 32_768), rope_theta=1_000_000.0, rms_norm_eps=1e-6
    )


MODELS = ("gpt2", "qwen2.5-0.5b", "qwen2.5-7b", "gemma2-head")


def build_model(name: str, context: int, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):  # parameters are created (and drawn) on the device, in `dtype`
        model = AutoModelForCausalLM.from_config(model_config(name, context), dtype=dtype)
    return model.eval()


def synthetic_batches(vocab: int, context: int, tokens: int, batch_tokens: int) -> list[tuple[int, list]]:
    """rbplab's windows and batches over random documents of 4 windows each (BOS id 0)."""
    from rbplab.extraction.scoring import batches
    from rbplab.extraction.windows import BosDecision, WindowPolicy, make_windows

    rng = np.random.default_rng(0)
    per_doc = 4 * (context - 1)
    documents = [rng.integers(1, vocab, per_doc) for _ in range(math.ceil(tokens / per_doc))]
    windows = make_windows(
        documents, WindowPolicy(context), BosDecision(True, 0, "benchmark"), max_tokens=tokens
    )
    return list(batches(windows, batch_tokens, context))


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


class PeakMemory:
    """Peak memory of what runs between `start()` and `peak()`, above what was held at `start()`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.base = 0

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            self.base = _status_bytes("VmRSS")
            with open("/proc/self/clear_refs", "w") as handle:  # reset VmHWM (Linux >= 4.0)
                handle.write("5")

    def peak(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return _status_bytes("VmHWM") - self.base


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run(approach: str, name: str, args: argparse.Namespace, queue: Any) -> None:
    """One approach on one model, in a process of its own; puts (seconds, tokens, peak bytes, info)."""
    if name not in MODELS:  # before the imports: a child that cannot run says so at once
        raise KeyError(f"unknown model {name!r}; the benchmark builds {', '.join(MODELS)}")
    from rbplab.extraction import ranks
    from rbplab.extraction.plan import SHARD_TOKENS
    from rbplab.extraction.scoring import Scorer, batch_arrays

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    model = build_model(name, args.context, device, dtype)
    vocab = model.config.vocab_size
    groups = synthetic_batches(vocab, args.context, args.tokens, args.batch_tokens)
    if approach.endswith("+ KV cache"):
        body = model.base_model
        forward = body.forward
        body.forward = lambda *a, use_cache=None, **k: forward(*a, use_cache=True, **k)
    if approach.startswith("fp32 head, "):  # the fp32 head's chunk forced to this many rows
        rows = int(approach.split(", ")[1].split()[0])
        ranks.MAX_CHUNK_ROWS = max(ranks.MAX_CHUNK_ROWS, rows)
        ranks.GPU_CHUNK_ELEMENTS = rows * vocab
    memory = PeakMemory(device)
    memory.start()  # before the scorer: the fp32 head's float32 copy is part of its cost
    scorer = None
    if approach != "bare forward":
        softcap = getattr(model.config, "final_logit_softcapping", None)
        scorer = Scorer(model, vocab, 0, softcap, head="fused" if approach == "fused head" else "fp32")

    def bare(length: int, group: list) -> int:
        ids = torch.from_numpy(batch_arrays(group, length, 0)[0]).to(device)
        _ = model(input_ids=ids, use_cache=False).logits
        return sum(w.n_scored for w in group)

    held: list = []
    held_tokens = 0

    def scored(length: int, group: list) -> int:
        nonlocal held_tokens
        held.append(scorer.score(length, group))
        held_tokens += sum(w.n_scored for w in group)
        if held_tokens >= SHARD_TOKENS:
            flush()
        return sum(w.n_scored for w in group)

    def flush() -> None:
        nonlocal held_tokens
        if held:  # one device-to-host copy per shard, as shard_frame makes it
            for column in zip(*held, strict=True):
                torch.cat(column).cpu()
        held.clear()
        held_tokens = 0

    step = bare if scorer is None else scored
    with torch.inference_mode():
        step(*groups[0])  # warm-up: kernels, allocator pools
        flush()
        _sync(device)
        started = time.perf_counter()
        tokens = sum(step(length, group) for length, group in groups)
        flush()
        _sync(device)
        seconds = time.perf_counter() - started
    n_params = sum(p.numel() for p in model.parameters())
    info = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    chunk = ranks.default_chunk_size(vocab, device)
    settled = scorer.head.tally.settled / max(scorer.head.tally.rows, 1) if scorer is not None else None
    queue.put((seconds, tokens, memory.peak(), n_params, len(groups), info, chunk, settled))


def run_approach(approach: str, name: str, args: argparse.Namespace, context: Any) -> tuple | str:
    """`_run` in a fresh process: its result, or why there is none ("exit code 1", "timed out")."""
    queue = context.Queue()
    process = context.Process(target=_run, args=(approach, name, args, queue))
    process.start()
    # Polled, so that a child that dies is seen at once rather than after the whole timeout.
    deadline, result = time.monotonic() + args.timeout, None
    while result is None and time.monotonic() < deadline:
        try:
            result = queue.get(timeout=1.0)
        except queues.Empty:
            if not process.is_alive():
                with contextlib.suppress(queues.Empty):  # what it put just before it ended
                    result = queue.get(timeout=1.0)
                break
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
        process.join()
        return "timed out" if result is None else result
    if result is None:
        return f"exit code {process.exitcode}" if process.exitcode else "no result"
    return result


def approaches(args: argparse.Namespace) -> list[str]:
    names = ["bare forward", "fp32 head"]
    names += [f"fp32 head, {rows} rows" for rows in args.chunk_rows]
    if torch.device(args.device).type == "cuda" and "fused" in args.heads:
        names.append("fused head")
    return names + (["fp32 head + KV cache"] if args.kv_cache else [])


def print_table(args: argparse.Namespace) -> bool:
    """The speed table of every model and approach; False when any approach failed."""
    print(
        f"device {args.device}, dtype {args.dtype}, context {args.context}, {args.tokens:,} scored tokens "
        f"per model, batches of <= {args.batch_tokens:,} padded tokens"
    )
    print(
        f"{'model':<14}{'approach':<24}{'tok/s':>10}{'seconds':>10}{'x bare':>8}{'peak MiB':>10}"
        f"{'settled':>9}"
    )
    context = mp.get_context("spawn")  # a fresh CUDA context and allocator per approach
    ok = True
    for name in args.models:
        bare_seconds = None
        for approach in approaches(args):
            result = run_approach(approach, name, args, context)
            if isinstance(result, str):
                ok = False
                print(f"{name:<14}{approach:<24}  FAILED: {result}", flush=True)
                continue
            seconds, scored, peak, n_params, n_batches, info, chunk, settled = result
            if approach == "bare forward":
                bare_seconds = seconds
                print(f"# {name}: {n_params / 1e6:,.0f}M parameters, {n_batches} batches, {info}")
            label = f"fp32 head, {chunk} rows" if approach == "fp32 head" else approach
            ratio = seconds / bare_seconds if bare_seconds else float("nan")
            print(
                f"{name:<14}{label:<24}{scored / seconds:>10,.0f}{seconds:>10.2f}{ratio:>7.2f}x"
                f"{peak / 2**20:>10,.0f}{'' if settled is None else f'{100 * settled:>8.2f}%'}",
                flush=True,
            )
    return ok


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU (rbplab's 'auto')")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="scored tokens per model")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--batch-tokens", type=int, default=None, help="default: rbplab's for the device")
    p.add_argument("--heads", nargs="+", default=["fp32", "fused"], choices=["fp32", "fused"])
    p.add_argument("--chunk-rows", nargs="*", type=int, default=[], help="fp32 head chunk sizes to try")
    p.add_argument("--kv-cache", action="store_true", help="also score with the KV cache on")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one approach may take")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    from rbplab.extraction.scoring import default_batch_tokens

    args.batch_tokens = args.batch_tokens or default_batch_tokens(args.device)
    args.dtype = args.dtype or ("bfloat16" if torch.device(args.device).type == "cuda" else "float32")
    return args


def main() -> None:
    sys.exit(0 if print_table(resolve(parser().parse_args())) else 1)


if __name__ == "__main__":
    main()
