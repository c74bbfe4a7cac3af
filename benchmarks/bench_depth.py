"""Ranks at every layer from one forward pass, next to the alternatives (issue 57).

    .venv/bin/python benchmarks/bench_depth.py --threads 1 --clock cpu
    .venv/bin/python benchmarks/bench_depth.py --model data/models/micro-4-559K --corpus wikipedia

Prints, for one model of L layers on the same batches of one corpus, as `extract` builds them:
- the scorer alone (no cache): all L layers from one forward pass (`Scorer.score_layers`, what
  `extract --layers all` runs per batch), L single-layer passes (one forward per layer), one
  final-layer pass (today's default), the body alone (the forward and the scored rows' final
  states), one head alone (exact ranks of those states) and L heads each on its own layer's states
  (a layer read through the lens may hold more near-ties for the head to settle). The ratio that
  matters is all layers in one pass over (body once + L heads): the lens adds only the final norm
  per layer (aim <= 1.2x); the same over (body once + each layer's own head) is printed beside it;
- whole `extract` runs into fresh caches: `layers="all"` against L runs of one layer each and
  against one final-layer run (weights, windows, scoring and writing included);
- peak memory of scoring every batch at every layer against the final layer only, each in a
  fresh process as the RSS high-water mark above the RSS once the scorer is loaded, beside what
  the kept states should take (L - 1 layers x scored rows x hidden size x 4 bytes per batch) and
  `rbplab plan`'s per-batch estimate of the final-layer run.

Approaches are interleaved over --repeats rounds (the machine may be shared); best and median
rounds are printed. --clock cpu measures this process's CPU time: with --threads 1 that is the
work done, unaffected by other processes taking turns on the cores.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from bench_extract import _reset_peak, _status_bytes  # this folder is on sys.path when run as a script

from rbplab.extraction.plan import model_layers, plan_extraction, plan_windows
from rbplab.extraction.scoring import batches

REPO = Path(__file__).resolve().parent.parent


def scorer_and_batches(model: str, corpus: str, max_tokens: int, batch_tokens: int):
    """(plan, its scorer as `extract` loads it, its batches [(length, windows)], L)."""
    from rbplab.extraction.pipeline import load_scorer

    plan = plan_extraction(model, corpus, max_tokens=max_tokens, batch_tokens=batch_tokens)
    groups = list(batches(plan_windows(plan), batch_tokens, plan.policy.context_length))
    return plan, load_scorer(plan), groups, model_layers(plan.described)


def interleaved(runs: dict[str, Callable[[], object]], clock, repeats: int) -> dict[str, list[float]]:
    """Seconds of each run per round, rounds interleaved, after one untimed round (warm-up)."""
    for fn in runs.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = clock()
            fn()
            times[name].append(clock() - start)
    return times


def print_times(title: str, times: dict[str, list[float]], base: str, n_tokens: int) -> None:
    best0, median0 = min(times[base]), statistics.median(times[base])
    print(f"\n{title:<44}{'s (best)':>10}{'ratio':>8}{'s (median)':>12}{'ratio':>8}{'tokens/s':>10}")
    for name, ts in times.items():
        best, median = min(ts), statistics.median(ts)
        print(
            f"{name:<44}{best:>10.3f}{best / best0:>7.2f}x{median:>12.3f}{median / median0:>7.2f}x"
            f"{n_tokens / best:>10,.0f}"
        )


def time_scorer(args, clock) -> None:
    plan, scorer, groups, n_layers = scorer_and_batches(
        args.model, args.corpus, args.max_tokens, args.batch_tokens
    )
    every = [*range(n_layers - 1), None]  # None: the final layer, read by the model's own head
    n_tokens = sum(w.n_scored for _, group in groups for w in group)
    info = plan.described.info
    print(
        f"model: {info.name} ({n_layers} layers, S = {info.n_nonembedding:,}, |V| = {plan.vocab_size:,}); "
        f"corpus: {plan.corpus.name}; {n_tokens:,} scored tokens in {len(groups)} batches of <= "
        f"{args.batch_tokens:,} padded tokens; torch threads: {torch.get_num_threads()}; clock: {args.clock}"
    )
    with torch.inference_mode():
        states = [scorer.hidden_states(length, group) for length, group in groups]
        # every layer's states through the lens: a layer's head may settle more near-ties than the last
        by_layer = [scorer.layer_states(length, group, every) for length, group in groups]

    def all_layers():
        for length, group in groups:
            scorer.score_layers(length, group, every)

    def single_layers():
        for layer in every:
            for length, group in groups:
                scorer.score_layers(length, group, [layer])

    def final_only():
        for length, group in groups:
            scorer.score(length, group)

    def body():
        with torch.inference_mode():
            for length, group in groups:
                scorer.hidden_states(length, group)

    def head():
        with torch.inference_mode():
            for hidden, targets in states:
                scorer.head(hidden, targets)

    def each_head():
        with torch.inference_mode():
            for layer_states, targets in by_layer:
                for hidden in layer_states.values():
                    scorer.head(hidden, targets)

    runs = {
        f"all {n_layers} layers, one forward": all_layers,
        f"{n_layers} single-layer passes": single_layers,
        "final layer only": final_only,
        "body alone (forward + final states)": body,
        "one head alone (exact ranks, final states)": head,
        f"{n_layers} heads, each on its layer's states": each_head,
    }
    times = interleaved(runs, clock, args.repeats)
    print_times("scorer, no cache", times, "final layer only", n_tokens)
    names = list(runs)
    for pick, label in ((min, "best"), (statistics.median, "median")):
        one_pass, body_s = pick(times[names[0]]), pick(times[names[3]])
        bound = body_s + n_layers * pick(times[names[4]])
        own = body_s + pick(times[names[5]])
        print(
            f"all layers in one pass / (body once + {n_layers} heads), {label}: "
            f"{one_pass:.3f} / {bound:.3f} = {one_pass / bound:.3f}x (aim <= 1.2x); "
            f"/ (body once + each layer's own head) {one_pass / own:.3f}x"
        )
    rounds = zip(times[names[0]], times[names[3]], times[names[4]], strict=True)
    ratios = [a / (b + n_layers * h) for a, b, h in rounds]
    print(f"  per round, / (body once + {n_layers} heads): {', '.join(f'{r:.3f}' for r in ratios)}")


def time_extract(args, clock) -> None:
    from rbplab.extraction.pipeline import extract
    from rbplab.grid import Grid

    n_layers = scorer_and_batches(args.model, args.corpus, args.max_tokens, args.batch_tokens)[3]
    settings = {"max_tokens": args.max_tokens, "batch_tokens": args.batch_tokens}

    def run(layers) -> Callable[[], None]:
        def go():
            with tempfile.TemporaryDirectory() as cache:
                for chosen in layers:
                    grid = Grid.from_names([args.model], [args.corpus], layers=chosen, **settings)
                    extract(grid, cache_dir=cache, progress=False)

        return go

    runs = {
        f'extract layers="all" ({n_layers} entries)': run(["all"]),
        f"{n_layers} extracts of one layer each": run([(i,) for i in range(n_layers)]),
        "one final-layer extract": run([None]),
    }
    times = interleaved(runs, clock, args.repeats)
    plan = plan_extraction(args.model, args.corpus, max_tokens=args.max_tokens)
    n_tokens = sum(w.n_scored for w in plan_windows(plan))
    print_times("whole extract, fresh cache each", times, "one final-layer extract", n_tokens)


def _peak_child(all_layers: bool, args_tuple: tuple, threads: int | None, queue) -> None:
    if threads:
        torch.set_num_threads(threads)
    _, scorer, groups, n_layers = scorer_and_batches(*args_tuple)
    layers = [*range(n_layers - 1), None] if all_layers else [None]
    with torch.inference_mode():
        length, group = groups[0]
        scorer.score_layers(length, group[:1], layers)  # kernels and allocator warmed up first
        base = _status_bytes("VmRSS")
        if not _reset_peak():
            queue.put(float("nan"))
            return
        for length, group in groups:
            scorer.score_layers(length, group, layers)
    queue.put(_status_bytes("VmHWM") - base)


def measure_memory(args) -> None:
    from rbplab.runner.cost_model import architecture, plan_costs

    plan, _, groups, n_layers = scorer_and_batches(
        args.model, args.corpus, args.max_tokens, args.batch_tokens
    )
    widest = max(sum(w.n_scored for w in group) for _, group in groups)
    d = int(plan.described.config.hidden_size)
    kept = (n_layers - 1) * widest * d * 4
    _, (weights, activations, head_chunk) = plan_costs(
        plan, architecture(plan.described.config), batch_tokens=args.batch_tokens, device="cpu"
    )
    print(
        "\npeak memory above the loaded scorer, every batch scored "
        f"(fresh process each, {args.repeats} rounds):"
    )
    ctx = mp.get_context("spawn")
    peaks: dict[str, list[int]] = {"all layers, one forward": [], "final layer only": []}
    for _ in range(args.repeats):
        for name in peaks:
            queue = ctx.Queue()
            params = (args.model, args.corpus, args.max_tokens, args.batch_tokens)
            proc = ctx.Process(target=_peak_child, args=(name.startswith("all"), params, args.threads, queue))
            proc.start()
            peaks[name].append(queue.get())
            proc.join()
    for name, values in peaks.items():
        print(
            f"  {name:<28}max {max(values) / 2**20:8.2f} MiB   "
            f"median {statistics.median(values) / 2**20:8.2f} MiB"
        )
    print(
        f"  the kept states of one batch: {n_layers - 1} layers x {widest:,} scored rows x {d} x 4 B = "
        f"{kept / 2**20:.2f} MiB"
    )
    print(
        f"  rbplab plan's estimate for the final-layer run on cpu: weights {weights / 2**20:.2f} MiB + "
        f"activations {activations / 2**20:.2f} MiB + head chunk {head_chunk / 2**20:.2f} MiB = "
        f"{(weights + activations + head_chunk) / 2**20:.2f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(REPO / "data" / "models" / "micro-6-2.7M"))
    parser.add_argument("--corpus", default="prose", help="bundled corpus name or local path")
    parser.add_argument("--max-tokens", type=int, default=4096, help="scored tokens per timed round")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="wall-clock or process CPU time"
    )
    parser.add_argument("--no-extract", action="store_true", help="skip the whole-extract comparison")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory comparison")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    time_scorer(args, clock)
    if not args.no_extract:
        time_extract(args, clock)
    if not args.no_memory:
        measure_memory(args)


if __name__ == "__main__":
    main()
