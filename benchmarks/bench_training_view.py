"""Notebook 06's views on a 5,000-entry study: one slider step in the lab and the size of what its
report page embeds, before and after a change, side by side (issue 52, item 2).

    .venv/bin/python benchmarks/bench_training_view.py --dir /tmp/grid --entries 5000 \
        --tokens 100000 --before cb746f9

The study is `bench_study.py synthetic`'s (write it first; the same --dir, --entries, --tokens),
opened with `load_study(entries=...)`. Its entries carry no checkpoint schedule, so their RBP_k
and CE are laid out as checkpoints: entry i is size i % 10 (S as the grid wrote it) of corpus
(i // 10) % 4 at checkpoint (i // 10) // 4, the checkpoints taken evenly from Pythia's 154 steps
(2,097,152 tokens per step, step 0 left out: notebook 06 draws D > 0). 5,000 entries give 10 sizes
x 125 checkpoints x 4 corpora at k = 1, 10, 100.

Each side runs in a fresh process on its own source tree: "before" on `git archive REV rbplab`,
"after" on this checkout. It times (ms, median / max over the positions) the step slider and the
k buttons of `TrainingView`, as notebook 06 shows it, on a live FigureWidget (the lab) and a
headless Figure; then builds what 06's page embeds from the view: the offline explorer and the
three static figures of loss against D (plotly JSON, the bytes the page holds for them; the
iso-loss figure is a fixed 60 x 60 surface and is left out), and prints their sizes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

KS = (1, 10, 100)
SIZES = 10  # bench_study.py synthetic: entry i is model synthetic-{i % 10} on corpus corpus-{i // 10}
CORPORA = 4
TOKENS_PER_STEP = 2_097_152
PYTHIA_STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, *range(1000, 143_001, 1000))


def _grid_module():
    # bench_study.py is a script, not a package: its entry spec names the grid's keys.
    path = Path(__file__).with_name("bench_study.py")
    spec = importlib.util.spec_from_file_location("bench_study", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steps(n: int) -> list[int]:
    """n checkpoints evenly spaced over Pythia's schedule after step 0, its first and last kept."""
    import numpy as np

    schedule = PYTHIA_STEPS[1:]
    picked = np.unique(np.round(np.linspace(0, len(schedule) - 1, n)).astype(int))
    return [schedule[j] for j in picked]


def training_table(root: str, n: int, n_tokens: int):
    """The grid's first n entries as a checkpoint table (`rbplab.study.training.table`'s columns)."""
    import numpy as np

    from rbplab.analysis import metrics
    from rbplab.store.cache.entry import CacheEntry
    from rbplab.study import load_study

    grid = _grid_module()
    keys = [CacheEntry(root, grid._entry_spec(i, n_tokens)).key for i in range(n)]
    clock = time.perf_counter()
    study = load_study(entries=keys, cache_dir=root)
    opened = time.perf_counter() - clock
    frame = study.points(list(KS))
    ce = {(r.model, r.corpus): metrics.cross_entropy(r.stats) for r in study.runs}
    frame["ce"] = [ce[key] for key in zip(frame["model"], frame["corpus"], strict=True)]
    pairs = zip(frame["model"], frame["corpus"], strict=True)
    i = np.array([int(c.split("-")[1]) * SIZES + int(m.split("-")[1]) for m, c in pairs])
    group = i // SIZES
    steps = np.array(_steps(-(-n // (SIZES * CORPORA))))
    frame["corpus"] = [f"corpus-{g % CORPORA}" for g in group]
    frame["model"] = [f"synthetic-{j % SIZES}" for j in i]
    frame["step"] = steps[group // CORPORA]
    frame["revision"] = [f"step{s}" for s in frame["step"]]
    frame["D"] = frame["step"].astype(float) * TOKENS_PER_STEP
    frame["C"] = 6 * frame["S"] * frame["D"]
    columns = ["family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"]
    return frame[columns], opened


def _timed(calls) -> list[float]:
    out = []
    for call in calls:
        clock = time.perf_counter()
        call()
        out.append(1000 * (time.perf_counter() - clock))
    return out


def measure(root: str, n: int, n_tokens: int) -> dict:
    import plotly.io as pio

    import rbplab
    from rbplab.analysis import data_scaling
    from rbplab.viz import plots
    from rbplab.viz.widgets import TrainingView

    table, opened = training_table(root, n, n_tokens)
    out = {"rbplab": str(Path(rbplab.__file__).parent), "opened_s": opened, "rows": len(table)}
    out["checkpoints"] = int(table["step"].nunique())
    out["sizes"] = int(table["S"].nunique())
    for live in (True, False):
        view = TrainingView(table, k=1, live=live)
        steps = [v for _, v in view.step_slider.options]
        # 20 positions across the slider, each a move from the last (as a drag goes).
        positions = [steps[j] for j in range(0, len(steps), max(1, len(steps) // 20))]
        step_ms = _timed([lambda s=s, v=view: v.set_step(s) for s in positions])
        k_ms = _timed([lambda k=k, v=view: v.set_k(k) for k in (10, 100, 1, 10, 100, 1)])
        side = "live" if live else "headless"
        out[f"{side}_step"] = [statistics.median(step_ms), max(step_ms)]
        out[f"{side}_k"] = [statistics.median(k_ms), max(k_ms)]
    clock = time.perf_counter()
    explorer = view.explorer()
    out["explorer_s"] = time.perf_counter() - clock
    out["explorer_mb"] = len(json.dumps(explorer)) / 1e6
    out["explorer_frames"] = len(explorer["frames"])
    out["explorer_note"] = next(
        a["text"] for a in explorer["layout"]["annotations"] if a.get("name") == "explorer grid"
    )
    # 06's three figures of loss against D (first corpus; k_low, k_high and CE), as it draws them.
    static = 0
    corpus = table["corpus"].iloc[0]
    for k, y in ((min(KS), "neg_log_rbp"), (max(KS), "neg_log_rbp"), (min(KS), "ce")):
        sel = table[(table["corpus"] == corpus) & (table["k"] == k)]
        figure = plots.training_dynamics(sel, data_scaling.data_fits(sel, y=y), y=y, y_label=y)
        static += len(pio.to_json(figure, validate=False))
    out["static_mb"] = static / 1e6
    return out


def _side(label: str, src: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, __file__, "_measure", args.dir, str(args.entries), str(args.tokens)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    # The side must have run the tree it names, not the checkout's editable install.
    if Path(row["rbplab"]).resolve() != (src / "rbplab").resolve():
        raise SystemExit(f"{label} imported rbplab from {row['rbplab']}, not {src}")
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_measure":
        root, n, n_tokens = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(measure(root, n, n_tokens)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the entries bench_study.py synthetic wrote")
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="rbplab-before-") as tmp:
        archive = Path(tmp) / "src.tar"
        with archive.open("wb") as f:
            subprocess.run(["git", "-C", str(repo), "archive", args.before, "rbplab"], stdout=f, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        rows = {"before": _side("before", Path(tmp), args), "after": _side("after", repo, args)}
    after = rows["after"]
    print(
        f"notebook 06 on {args.entries:,} grid entries of {args.tokens:,} tokens laid out as "
        f"{after['sizes']} sizes x {after['checkpoints']} checkpoints x {CORPORA} corpora "
        f"({after['rows']:,} table rows, k = {', '.join(map(str, KS))}); before = {args.before}"
    )
    print(f"{'':<36}{'before':>16}{'after':>16}")
    lines = [
        ("step slider, live (ms median/max)", "live_step"),
        ("step slider, headless (ms)", "headless_step"),
        ("k buttons, live (ms median/max)", "live_k"),
        ("k buttons, headless (ms)", "headless_k"),
    ]
    for name, key in lines:
        cells = "".join(f"{rows[s][key][0]:>9.0f} / {rows[s][key][1]:<4.0f}" for s in rows)
        print(f"{name:<36}{cells}")
    for name, key, unit in (
        ("explorer build (s)", "explorer_s", "{:>16.1f}"),
        ("explorer JSON (MB)", "explorer_mb", "{:>16.2f}"),
        ("explorer frames", "explorer_frames", "{:>16d}"),
        ("3 static figures' JSON (MB)", "static_mb", "{:>16.2f}"),
    ):
        print(f"{name:<36}" + "".join(unit.format(rows[s][key]) for s in rows))
    for s in rows:
        print(f"{s} explorer note: {rows[s]['explorer_note'].replace('<br>', ' / ')}")
    opened = rows["before"]["opened_s"], after["opened_s"]
    print(f"study opened in {opened[0]:.1f} s (before) and {opened[1]:.1f} s (after)")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
