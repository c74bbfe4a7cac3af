"""Opening studies from entry summaries versus holding every token: memory and time, printed.

Two benchmarks, each variant in a fresh process so peak RSS is its own (RSS is read with
/proc/self/status VmHWM; "above baseline" subtracts the RSS after the imports):

  demo   the demo's study (micro family x the bundled corpora, a cache filled by `make demo`):
         load + fit_table + ksweep + bootstrap(200) + emergence + training_table, once from
         summaries (`load_study`) and once holding every token (the runs' TokenStats read from the
         same cache, as studies were built before summaries); prints seconds per stage and RSS.

             .venv/bin/python benchmarks/bench_study.py demo --cache ~/.cache/rbplab

  grid   a checkpoint grid as a study file names it (families = ["micro"], revisions = "log:5": 30
         checkpoints) on N corpora cut from the bundled ones, 30 N entries, each planned for real
         (its key and plan record) and scored by a made-up model (lognormal ranks) through the
         store's own API, so its summary and index row are derived as a worker derives them. Then
         the first N corpora's entries opened both ways, each in a new process: `load_study` of the
         study file (as `rbplab fit`, `rbplab report` and the notebooks open it) and
         `load_study(entries=...)` of the same keys, cold (the index as the writers left it: a row
         file per entry) and warm (a second open), and up to `--compare-max` entries each summary
         read whole; seconds, RSS, fit_table and ksweep, and whether every table is the same.
         Writing is resumable: entries already complete are kept (progress in DIR/progress.txt).

             .venv/bin/python benchmarks/bench_study.py grid --dir /tmp/grid --corpora 10 34 100 167

  synthetic  writes made-up entries by key only (no model, no plan record; lognormal ranks at
         |V| = 151,936): the study `bench_training_view.py` lays out as checkpoints.

             .venv/bin/python benchmarks/bench_study.py synthetic --dir /tmp/grid --entries 5000
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
    from rbplab.study.loading import default_corpora

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


# ---- synthetic: made-up entries by key (bench_training_view.py's study) ----------------------
VOCAB = 151_936
SHARD_TOKENS = 1 << 16


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


def write_synthetic(root: Path, n_entries: int, n_tokens: int) -> list[str]:
    """`n_entries` entries of `n_tokens` made-up tokens each (lognormal ranks at |V| = 151,936), keyed
    by `_entry_spec` (no model, no plan record: `load_study(entries=...)` opens them, and
    `bench_training_view.py` lays them out as checkpoints). Resumable."""
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


# ---- grid ------------------------------------------------------------------------------------
# The checkpoint grid: the micro family at its five log-spaced checkpoints (30 models), as a study
# file names it, on `n` small corpora cut from the bundled ones, so 30 x n entries.
CORPUS_SOURCES = ("prose", "wikipedia", "legal-standin", "humaneval")
DOC_CHARS = 1500


def _write_corpora(folder: Path, n_corpora: int, docs_per_corpus: int) -> list[Path]:
    """`n_corpora` corpus files of `docs_per_corpus` documents, cut from the bundled corpora."""
    import gzip

    root = Path(__file__).resolve().parent.parent / "data" / "corpora"
    pieces = []
    for name in CORPUS_SOURCES:
        with gzip.open(root / f"{name}.jsonl.gz", "rt") as handle:
            for line in handle:
                text = json.loads(line)["text"]
                pieces += [text[i : i + DOC_CHARS] for i in range(0, len(text) - DOC_CHARS + 1, DOC_CHARS)]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for c in range(n_corpora):
        path = folder / f"c{c:04d}.jsonl"
        paths.append(path)
        if not path.exists():
            docs = [pieces[(c * docs_per_corpus + j) % len(pieces)] for j in range(docs_per_corpus)]
            lines = [json.dumps({"id": f"c{c}-{j}", "text": t}) for j, t in enumerate(docs)]
            path.write_text("\n".join(lines) + "\n")
    return paths


def study_file(root: Path, n_corpora: int) -> Path:
    """The study file of the grid's first `n_corpora` corpora (the corpora written already)."""
    names = sorted((root / "corpora").glob("c*.jsonl"))[:n_corpora]
    path = root / f"study-{n_corpora}.toml"
    listed = "".join(f'  "{p}",\n' for p in names)
    path.write_text(f'families = ["micro"]\nrevisions = "log:5"\ncorpora = [\n{listed}]\n')
    return path


def _made_up_frame(shard: list, documents, vocab_size: int, rng: np.random.Generator) -> pd.DataFrame:
    """A shard's rows as `rbplab.extraction.scoring.shard_frame` lays them out (the plan's windows:
    documents, positions, targets), with lognormal ranks and gamma nll in place of a model's."""
    doc_index = np.concatenate([np.full(w.n_scored, w.doc_index, dtype=np.int32) for w in shard])
    n = len(doc_index)
    ranks = np.clip(np.floor(np.exp(rng.normal(2.0, 2.0, n))), 1, vocab_size).astype(np.int64)
    tied = (rng.random(n) < 0.002) & (ranks < vocab_size)
    frame = pd.DataFrame(
        {
            "doc_index": doc_index,
            "doc_id": [documents[i].id for i in doc_index],
            "position": np.concatenate([w.positions() for w in shard]).astype(np.int32),
            "target_id": np.concatenate([w.input_ids[w.target_rows()] for w in shard]).astype(np.int32),
            "n_greater": (ranks - 1).astype(np.int32),
            "n_equal": np.where(tied, 2, 1).astype(np.int32),
            "nll": rng.gamma(2.0, 1.5, n).astype(np.float32),
        }
    )
    return frame.sort_values(["doc_index", "position"], kind="stable").reset_index(drop=True)


def write_grid(root: Path, n_corpora: int, docs_per_corpus: int) -> list[str]:
    """The grid's entries, each where `rbplab run` of the study file would write it: every run planned
    (`plan_and_record`: its key, and the plan record that finds it without model code), its shards
    made up (`_made_up_frame`) and written through the store's own API (write_shard + finalize with
    the extractor's manifest, so its summary and index row are derived as a worker derives them).
    Resumable: complete entries are kept. Returns the keys, corpora outer (the study's order)."""
    from rbplab.extraction.plan import plan_and_record
    from rbplab.extraction.scoring import entry_manifest
    from rbplab.grid import Grid
    from rbplab.store.cache.entry import CacheEntry

    _write_corpora(root / "corpora", n_corpora, docs_per_corpus)
    grid = Grid.read(study_file(root, n_corpora))
    cache, progress = root / "cache", root / "progress.txt"
    keys, described, clock = [], {}, time.perf_counter()
    for i, run in enumerate(grid.runs(outer="corpus")):  # corpora outer: each corpus tokenized once
        plan = plan_and_record(run.model, run.corpus, grid.settings, cache, described=described)
        entry = CacheEntry(cache, plan.key_spec)
        keys.append(entry.key)
        if entry.is_complete():
            continue
        rng = np.random.default_rng(i)
        shards, documents = plan.shards, plan.corpus.documents
        with entry.lock():
            for index, shard in enumerate(shards):
                entry.write_shard(index, _made_up_frame(shard, documents, plan.vocab_size, rng))
            tokens = sum(w.n_scored for shard in shards for w in shard)
            entry.finalize(entry_manifest(plan, shards, 0.0, tokens, 0), len(shards))
        if i % 30 == 29:
            progress.write_text(f"{i + 1} entries, {time.perf_counter() - clock:.0f} s\n")
    (root / "keys.txt").write_text("\n".join(keys) + "\n")
    return keys


def grid_variant(root: str, n_corpora: int, variant: str) -> dict:
    """Open the grid of the first `n_corpora` corpora in this process: "grid" (`load_study` of its
    study file, as `rbplab fit`, `rbplab report` and the notebooks open it), "entries"
    (`load_study(entries=...)` of the same entries' keys) or "summaries" (each entry's summary
    read whole, as `load_study` of a grid read them before issue 56); then fit_table and ksweep."""
    import pyarrow.parquet  # noqa: F401  (what every variant loads, before the baseline)

    from rbplab.core.runs import Run, run_label, training_compute
    from rbplab.extraction import fingerprints  # noqa: F401
    from rbplab.grid import Grid
    from rbplab.store.cache.entry import CacheEntry
    from rbplab.study import Study, load_study, size

    folder = Path(root)
    cache = folder / "cache"
    keys = (folder / "keys.txt").read_text().split()[: 30 * n_corpora]
    base = _rss_mb()
    clock, cpu = time.perf_counter(), time.process_time()
    if variant == "grid":
        study = load_study(Grid.read(study_file(folder, n_corpora)), cache_dir=cache)
    elif variant == "entries":
        study = load_study(entries=keys, cache_dir=cache)
    else:
        runs = []
        for key in keys:
            entry = CacheEntry.open(key, cache)
            manifest = entry.manifest()
            model, corpus, at = manifest["model"], manifest["corpus"], manifest["training"]
            S = float(model["n_nonembedding"])
            checkpoint = {"step": at["step"], "D": at["D"], "C": training_compute(S, at["D"])}
            name = entry.spec["model"]["name"]  # as asked: one name for a model's checkpoints
            revision = entry.spec["model"].get("revision") or "final"
            summary = entry.summary(manifest)
            label = run_label(name, revision)
            runs.append(Run("custom", label, corpus["name"], S, summary, revision=revision, **checkpoint))
        study = Study(runs)
    seconds, open_cpu = time.perf_counter() - clock, time.process_time() - cpu
    open_mb = _rss_mb() - base
    clock, cpu = time.perf_counter(), time.process_time()
    final = study.at_step()  # the size law compares each model's last checkpoint
    fit = size.fit_table(final, [1, 10, 100])
    fit_seconds = time.perf_counter() - clock
    clock = time.perf_counter()
    sweep = size.ksweep(final)
    sweep_seconds = time.perf_counter() - clock
    analysis_cpu = time.process_time() - cpu
    # numbers only, order-free (labels differ: entries= names a family "custom", the grid "micro")
    points = study.points([1, 10, 100])[["S", "step", "D", "C", "k", "rbp", "neg_log_rbp", "n_tokens"]]
    digests = {
        name: float(
            pd.util.hash_pandas_object(t.select_dtypes("number").round(12), index=False).sum() % 10**9
        )
        for name, t in (("points", points), ("fit_table", fit), ("ksweep", sweep))
    }
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
        "digests": digests,
    }


def _written_keys(root: Path, n_corpora: int) -> list[str] | None:
    """The keys `write_grid` wrote for `n_corpora` corpora, when every entry is complete (planning
    5,000 runs again only to find them costs minutes); None otherwise."""
    from rbplab.store.cache.entry import CacheEntry

    listed = root / "keys.txt"
    keys = listed.read_text().split() if listed.is_file() else []
    if len(keys) != 30 * n_corpora or not all(CacheEntry.open(k, root / "cache").is_complete() for k in keys):
        return None
    return keys


def keep_row_files(cache: Path, keys: list[str], pristine: Path) -> None:
    """Keep in `pristine` the row file of every entry of `keys`, as `CacheEntry.finalize` writes it
    when the entry completes (from the index, which may have merged them since)."""
    from rbplab.store.cache import index

    pristine.mkdir(parents=True)
    rows = index.CacheIndex(cache).rows
    for key in keys:
        row = rows[key][0]
        (pristine / row.file_name).write_bytes(index._encode([row], merged=False))


# Issue 56's figures for load_study(entries=...) at 5,000 entries of 100,000 tokens (0.23 MB summaries),
# the targets for both ways, and what load_study of a grid did then (every summary read whole).
ISSUE_56 = "entries= at 5,000: 10.3 s cold, 6.1 s warm, 242 MB; targets: <= 30 s cold, <= 3 s warm, <= 1 GB"


def run_grid(root: Path, corpora: list[int], docs_per_corpus: int, compare_max: int) -> None:
    import shutil

    from rbplab.store.cache import index
    from rbplab.store.cache.layout import SUMMARY_FILE

    clock = time.perf_counter()
    keys = _written_keys(root, max(corpora)) or write_grid(root, max(corpora), docs_per_corpus)
    took = time.perf_counter() - clock
    print(f"wrote/kept {len(keys)} entries ({max(corpora)} corpora x 30 checkpoints) in {took:.0f} s")
    cache = root / "cache"
    sizes = [(cache / k[:2] / k / SUMMARY_FILE).stat().st_size for k in keys]
    print(f"summary size per entry: median {np.median(sizes) / 1e3:.1f} kB, max {max(sizes) / 1e3:.1f} kB")
    # "cold": the index as the writers of the entries left it (one row file per entry, nothing
    # merged), restored before each cold open; "warm": a second open, in a new process.
    folder = index.index_dir(cache)
    pristine = root / "index-rows-as-written"
    if not pristine.is_dir():
        keep_row_files(cache, keys, pristine)
    print(ISSUE_56)
    print(
        'grid: load_study(Grid.read(study file)) (families = ["micro"], revisions = "log:5", N/30 corpora);'
    )
    print("entries: load_study(entries=keys) of the same entries; summaries: each summary read whole (the")
    print("grid's way before issue 56), up to --compare-max entries. Each open in a new process; cold: the")
    print("index as the entries' writers left it (a row file per entry; merged by this open); warm: a")
    print("second open.")
    print("RSS: MB above the baseline after the imports, after the open and at the peak (after ksweep).")
    print("Seconds are wall-clock; CPU s: this process's CPU time (other jobs on the machine add none).")
    head = f"{'entries':>8}{'variant':>15}{'open s':>8}{'RSS open':>9}{'peak':>7}"
    print(head + f"{'fit_table s':>12}{'ksweep s':>9}{'CPU s: open':>12}{'fit+sweep':>10}")
    for n in sorted(corpora):
        rows = {}
        for way in ("grid", "entries"):
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(pristine, folder)
            rows[f"{way} cold"] = _child(["_grid", str(root), str(n), way])
            rows[f"{way} warm"] = _child(["_grid", str(root), str(n), way])
        if 30 * n <= compare_max:
            rows["summaries"] = _child(["_grid", str(root), str(n), "summaries"])
        for variant, row in rows.items():
            peak = row["peak_mb"] - row["base_mb"]
            print(
                f"{row['runs']:>8}{variant:>15}{row['seconds']:>8.1f}{row['open_mb']:>9.0f}{peak:>7.0f}"
                f"{row['fit_table']:>12.2f}{row['ksweep']:>9.2f}{row['open_cpu']:>12.1f}{row['analysis_cpu']:>10.1f}"
            )
        load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"{'':>8}load average (1, 5, 15 min) after these runs: {load}")
        same = len({json.dumps(row["digests"], sort_keys=True) for row in rows.values()}) == 1
        print(f"{'':>8}points, fit_table and ksweep identical in every variant: {same}")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(pristine, folder)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_demo":
        print(json.dumps(demo_variant(sys.argv[2], sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_grid":
        print(json.dumps(grid_variant(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    demo = sub.add_parser("demo")
    demo.add_argument("--cache", required=True)
    synthetic = sub.add_parser("synthetic")
    synthetic.add_argument("--dir", required=True, type=Path)
    synthetic.add_argument("--entries", type=int, default=5000)
    synthetic.add_argument("--tokens", type=int, default=100_000)
    grid = sub.add_parser("grid")
    grid.add_argument("--dir", required=True, type=Path)
    grid.add_argument(
        "--corpora", nargs="+", type=int, default=[10, 34], help="open the first N corpora (30 N entries)"
    )
    grid.add_argument("--docs", type=int, default=32, help="documents of 1,500 characters per corpus")
    grid.add_argument(
        "--compare-max", type=int, default=1000, help="read every summary whole up to this many entries"
    )
    args = parser.parse_args()
    if args.what == "demo":
        run_demo(args.cache)
    elif args.what == "synthetic":
        print(f"{len(write_synthetic(args.dir, args.entries, args.tokens))} entries under {args.dir}")
    else:
        run_grid(args.dir, sorted(args.corpora), args.docs, args.compare_max)


if __name__ == "__main__":
    main()
