"""Opening studies from entry summaries versus holding every token: memory and time, printed.

Two benchmarks, each variant in a fresh process so peak RSS is its own (RSS is read with
/proc/self/status VmHWM; "above baseline" subtracts the RSS after the imports):

  demo   the demo's study (micro family x the bundled corpora, a cache filled by `make demo`):
         load + fit_table + ksweep + bootstrap(200) + emergence + training_table, once from
         summaries (`load_study`) and once holding every token (the runs' TokenStats read from the
         same cache, as studies were built before summaries); prints seconds per stage and RSS.

             .venv/bin/python benchmarks/bench_study.py demo --cache ~/.cache/rbplab

  grid   a synthetic grid written through the store's own API (CacheEntry.write_shard + finalize,
         so every entry's summary and index row are derived as a worker would): random lognormal
         ranks at |V| = 151,936, `--tokens` per entry; then opens the first N entries
         (`load_study(entries=...)`) for each N of `--entries`, cold (the index as the writers left
         it: a row file per entry) and warm (a second open), and without the index (each summary
         read whole) up to `--compare-max` entries; reports seconds, RSS, fit_table and ksweep
         seconds beside issue 52's measurements before the index, and the machine's load.
         Writing is resumable: entries already complete are kept (progress in WRITE_DIR/progress.txt).

             .venv/bin/python benchmarks/bench_study.py grid --dir /tmp/grid \\
                 --entries 250 500 1000 2000 5000 --tokens 100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

VOCAB = 151_936
SHARD_TOKENS = 1 << 16


def _rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from
    the parent across fork and exec, so a child would report the parent's peak as its own."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- demo ------------------------------------------------------------------------------------
def demo_variant(cache: str, variant: str) -> dict:
    import pyarrow.parquet  # noqa: F401  (libraries every variant loads, before the baseline)

    from rbplab.core import Run
    from rbplab.grid import Grid
    from rbplab.store.cache.admin import list_entries
    from rbplab.study import Study, emergence, load_study, size, training
    from rbplab.study.study import default_corpora

    imports = _rss_mb()
    if variant != "entries":  # deriving keys from models and corpora needs torch and transformers
        import torch  # noqa: F401
        import transformers  # noqa: F401
    base = _rss_mb()
    times = {}
    clock = time.perf_counter()
    if variant == "entries":  # the same entries by key: no model described, no model code imported
        table = list_entries(cache)
        # the demo's full-corpus runs (its checkpoint runs hold the first 16,384 tokens of each corpus)
        study = load_study(entries=list(table.loc[table["n_tokens"] > 16_384, "key"]), cache_dir=cache)
    else:
        study = load_study(Grid.from_names("micro", default_corpora()), cache_dir=cache)
    if variant == "tokens":  # every run's tokens in memory, as a study held them before summaries
        study = Study([Run(r.family, r.model, r.corpus, r.S, r.token_stats()) for r in study.runs])
    times["load"] = time.perf_counter() - clock
    rss = {"load": _rss_mb() - base}
    stages = {
        "fit_table": lambda: size.fit_table(study, [1, 10, 100]),
        "ksweep": lambda: size.ksweep(study),
        "bootstrap(200)": lambda: size.bootstrap(study, [1, 10, 100], n_boot=200),
        "emergence": lambda: emergence.table(study, [1, 10, 100], [1, 2, 4, 8, 16, 32], n_boot=200),
        "training_table": lambda: training.table(study, [1, 10, 100]),
    }
    results = {}
    for name, stage in stages.items():
        clock = time.perf_counter()
        results[name] = stage()
        times[name] = time.perf_counter() - clock
        rss[name] = _rss_mb() - base
    # numbers only (labels differ: load_study(entries=...) names a family "custom"); a sum of row hashes
    # does not depend on the order of the runs
    digest = {
        name: float(
            pd.util.hash_pandas_object(t.select_dtypes("number").round(12), index=False).sum() % 10**9
        )
        for name, t in results.items()
    }
    n_tokens = sum(r.n_tokens for r in study.runs)
    peak = _rss_mb()
    return {
        "rss_by_stage": rss,
        "imports_mb": imports,
        "base_mb": base,
        "peak_mb": peak,
        "times": times,
        "tokens": n_tokens,
        "digest": digest,
    }


def run_demo(cache: str) -> None:
    rows = {v: _child(["_demo", cache, v]) for v in ("summaries", "entries", "tokens")}
    print(f"demo study: {rows['summaries']['tokens']:,} scored tokens, cache {cache}")
    stages = list(rows["summaries"]["times"])
    print("summaries: load_study (keys derived from models and corpora, summaries read);")
    print("entries: load_study(entries=...), the same entries by key; tokens: every run's tokens held")
    print(f"{'stage':<16}" + "".join(f"{v:>14}" for v in rows) + "   tokens/summaries")
    for stage in stages:
        a, e, b = (rows[v]["times"][stage] for v in ("summaries", "entries", "tokens"))
        print(f"{stage:<16}{a:>13.2f}s{e:>13.2f}s{b:>13.2f}s  {b / a:>7.1f}x")
    total = {v: sum(rows[v]["times"].values()) for v in rows}
    ratio = total["tokens"] / total["summaries"]
    line = "".join(f"{total[v]:>13.2f}s" for v in rows)
    print(f"{'total':<16}{line}  {ratio:>7.1f}x")
    for v, row in rows.items():
        print(
            f"{v}: peak RSS {row['peak_mb']:.0f} MB, {row['peak_mb'] - row['base_mb']:.0f} MB above "
            f"the import baseline ({row['base_mb']:.0f} MB; {row['imports_mb']:.0f} MB before torch)"
        )
    print("peak RSS above the baseline after each stage (MB):")
    for v, row in rows.items():
        print(f"  {v:<10}" + ", ".join(f"{k} {m:.0f}" for k, m in row["rss_by_stage"].items()))
    same = rows["summaries"]["digest"] == rows["tokens"]["digest"] == rows["entries"]["digest"]
    print(f"tables identical (rounded to 1e-12) in all variants: {same}")


# ---- grid ------------------------------------------------------------------------------------
def _entry_spec(i: int, n_tokens: int) -> dict:
    return {"synthetic_grid": i, "tokens": n_tokens, "vocab": {"size": VOCAB}}


def _tokens(i: int, n_tokens: int, n_docs: int = 1000) -> pd.DataFrame:
    """Lognormal ranks (the paper's shape) whose location falls with the entry's model size."""
    rng = np.random.default_rng(i)
    size_index = i % 10
    ranks = np.floor(np.exp(rng.normal(2.0 - 0.08 * size_index, 2.2, n_tokens))).astype(np.int64)
    ranks = np.clip(ranks, 1, VOCAB)
    tied = rng.random(n_tokens) < 0.002
    equal = np.where(tied & (ranks < VOCAB), 2, 1)
    per_doc = n_tokens // n_docs
    doc = np.minimum(np.arange(n_tokens) // per_doc, n_docs - 1)
    position = np.arange(n_tokens) - doc * per_doc
    return pd.DataFrame(
        {
            "doc_index": doc.astype(np.int32),
            "doc_id": pd.Series(doc).astype(str),
            "position": position.astype(np.int32),
            "target_id": rng.integers(0, VOCAB, n_tokens).astype(np.int32),
            "n_greater": (ranks - 1).astype(np.int32),
            "n_equal": equal.astype(np.int32),
            "nll": rng.gamma(2.0, 1.5, n_tokens).astype(np.float32),
        }
    )


def write_grid(root: Path, n_entries: int, n_tokens: int) -> list[str]:
    from rbplab.store.cache.entry import CacheEntry

    root.mkdir(parents=True, exist_ok=True)
    progress = root / "progress.txt"
    keys, clock = [], time.perf_counter()
    for i in range(n_entries):
        entry = CacheEntry(root, _entry_spec(i, n_tokens))
        keys.append(entry.key)
        if entry.is_complete():
            continue
        frame = _tokens(i, n_tokens)
        with entry.lock():
            for index, start in enumerate(range(0, n_tokens, SHARD_TOKENS)):
                entry.write_shard(index, frame.iloc[start : start + SHARD_TOKENS])
            size = 1e9 * (1 + i % 10)
            entry.finalize(
                {
                    "vocab_size": VOCAB,
                    "model": {"name": f"synthetic-{i % 10}", "n_nonembedding": size},
                    "corpus": {"name": f"corpus-{i // 10}"},
                }
            )
        if i % 10 == 9:
            progress.write_text(
                f"{i + 1}/{n_entries} entries of {n_tokens} tokens, {time.perf_counter() - clock:.0f} s\n"
            )
    return keys


def backfill_rows(root: Path, keys: list[str], pristine: Path) -> int:
    """Keep in `pristine` the row file of every entry of `keys`, as `CacheEntry.finalize` writes it
    when an entry completes: taken from the index when it holds the entry's row, else derived from
    the entry's summary (entries written before the index existed); returns how many were added."""
    from rbplab.store.cache import index
    from rbplab.store.cache.entry import CacheEntry

    pristine.mkdir(parents=True, exist_ok=True)
    have = {m[1] for m in map(index.ROW_FILE_RE.match, os.listdir(pristine)) if m}
    present = index.CacheIndex(root)
    added = 0
    for key in keys:
        if key in have:
            continue
        entry = CacheEntry.open(key, root)
        manifest = entry.manifest()
        row, _ = present.row_for(entry, manifest)
        if row is None:
            summary, record = entry.stored_summary(manifest)
            row = index.row_of(key, summary, record)
        (pristine / row.file_name).write_bytes(index._encode([row], merged=False))
        added += 1
    return added


def grid_variant(root: str, n_tokens: int, n: int, variant: str) -> dict:
    """Open the first n entries: "index" (load_study(entries=...), through the cache index) or
    "summaries" (each entry's summary read whole, as load_study read them before the index)."""
    from rbplab.core.runs import Run
    from rbplab.store.cache.entry import CacheEntry
    from rbplab.study import Study, load_study, size

    keys = [CacheEntry(root, _entry_spec(i, n_tokens)).key for i in range(n)]
    base = _rss_mb()
    clock, cpu = time.perf_counter(), time.process_time()
    if variant == "index":
        study = load_study(entries=keys, cache_dir=root)
    else:
        runs = []
        for key in keys:
            entry = CacheEntry.open(key, root)
            manifest = entry.manifest()
            model, corpus = manifest["model"], manifest["corpus"]
            runs.append(
                Run("custom", model["name"], corpus["name"], model["n_nonembedding"], entry.summary(manifest))
            )
        study = Study(runs)
    seconds, open_cpu = time.perf_counter() - clock, time.process_time() - cpu
    open_mb = _rss_mb() - base
    clock, cpu = time.perf_counter(), time.process_time()
    fit = size.fit_table(study, [1, 10, 100])
    fit_seconds = time.perf_counter() - clock
    clock = time.perf_counter()
    sweep = size.ksweep(study)
    sweep_seconds = time.perf_counter() - clock
    analysis_cpu = time.process_time() - cpu
    digest = float(
        sum(
            pd.util.hash_pandas_object(t.select_dtypes("number").round(12), index=False).sum() % 10**9
            for t in (fit, sweep)
        )
    )
    return {
        "base_mb": base,
        "open_mb": open_mb,
        "peak_mb": _rss_mb(),
        "seconds": seconds,
        "open_cpu": open_cpu,
        "analysis_cpu": analysis_cpu,
        "fit_table": fit_seconds,
        "ksweep": sweep_seconds,
        "runs": len(study.runs),
        "digest": digest,
    }


# Measured on main (797a97e) before the index, quiet 2-core machine (issue 52): entries ->
# (load_study(entries=...) s, peak RSS after fit_table MB, above the baseline MB).
BASELINE = {
    250: (2.3, 394, 243),
    500: (3.4, 617, 465),
    1000: (7.6, 1063, 912),
    2000: (17.9, 1959, 1809),
    5000: (58.6, 4653, 4501),
}


def run_grid(root: Path, entries: list[int], n_tokens: int, compare_max: int) -> None:
    import shutil

    from rbplab.store.cache import index
    from rbplab.store.cache.layout import SUMMARY_FILE

    clock = time.perf_counter()
    keys = write_grid(root, max(entries), n_tokens)
    print(f"wrote/kept {len(keys)} entries of {n_tokens:,} tokens in {time.perf_counter() - clock:.0f} s")
    sizes = [(root / k[:2] / k / SUMMARY_FILE).stat().st_size for k in keys]
    print(f"summary size per entry: median {np.median(sizes) / 1e6:.3f} MB, max {max(sizes) / 1e6:.3f} MB")
    # "cold": the index as the workers that completed the entries leave it (one row file per entry,
    # nothing merged), restored before each cold open; "warm": a second open in a new process.
    folder = index.index_dir(root)
    pristine = root / "index-rows-as-written"
    clock = time.perf_counter()
    added = backfill_rows(root, keys, pristine)
    print(f"index row files kept for the cold opens: {added} added ({time.perf_counter() - clock:.0f} s)")
    print("open s: load_study(entries=...) of the first N entries, each in a new process; cold: the index as")
    print("the entries' writers left it (a row file per entry; merged by this open); warm: a second open;")
    print("summaries: each summary read whole (the path before the index), only up to --compare-max entries;")
    print("before: issue 52's table (main at 797a97e, quiet machine).")
    print("RSS: MB above the baseline after the imports, after the open and at the peak (after ksweep).")
    print("Seconds are wall-clock; CPU s: this process's CPU time (other jobs on the machine add none).")
    head = f"{'entries':>8}{'variant':>11}{'open s':>8}{'before s':>9}{'RSS open':>9}{'peak':>7}{'before':>7}"
    print(head + f"{'fit_table s':>12}{'ksweep s':>9}{'CPU s: open':>12}{'fit+sweep':>10}")
    for n in entries:
        rows = {}
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(pristine, folder)
        rows["cold"] = _child(["_grid", str(root), str(n_tokens), str(n), "index"])
        rows["warm"] = _child(["_grid", str(root), str(n_tokens), str(n), "index"])
        if n <= compare_max:
            rows["summaries"] = _child(["_grid", str(root), str(n_tokens), str(n), "summaries"])
        before = BASELINE.get(n)
        for variant, row in rows.items():
            was = f"{before[0]:>9.1f}" if before and variant != "warm" else f"{'':>9}"
            was_mb = f"{before[2]:>7}" if before and variant != "warm" else f"{'':>7}"
            peak = row["peak_mb"] - row["base_mb"]
            print(
                f"{n:>8}{variant:>11}{row['seconds']:>8.1f}{was}{row['open_mb']:>9.0f}{peak:>7.0f}{was_mb}"
                f"{row['fit_table']:>12.2f}{row['ksweep']:>9.2f}{row['open_cpu']:>12.1f}{row['analysis_cpu']:>10.1f}"
            )
        load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"{'':>8}load average (1, 5, 15 min) after these runs: {load}")
        same = len({row["digest"] for row in rows.values()}) == 1
        print(f"{'':>8}fit_table and ksweep identical in every variant: {same}")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(pristine, folder)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_demo":
        print(json.dumps(demo_variant(sys.argv[2], sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_grid":
        print(json.dumps(grid_variant(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    demo = sub.add_parser("demo")
    demo.add_argument("--cache", required=True)
    grid = sub.add_parser("grid")
    grid.add_argument("--dir", required=True, type=Path)
    grid.add_argument("--entries", nargs="+", type=int, default=[100, 300, 1000])
    grid.add_argument("--tokens", type=int, default=1_000_000)
    grid.add_argument(
        "--compare-max", type=int, default=1000, help="open without the index up to this many entries"
    )
    args = parser.parse_args()
    if args.what == "demo":
        run_demo(args.cache)
    else:
        run_grid(args.dir, sorted(args.entries), args.tokens, args.compare_max)


if __name__ == "__main__":
    main()
