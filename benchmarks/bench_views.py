"""Time the interactive views' callbacks in Python: what one slider step costs before the browser
redraws (target: under 100 ms).

    .venv/bin/python benchmarks/bench_views.py                 # the demo study (make demo) from the cache
    .venv/bin/python benchmarks/bench_views.py --synthetic     # a made-up study of the same shape

Each callback is timed on a live FigureWidget (as in JupyterLab) and on a headless Figure; the
median and the maximum over the slider positions are printed, with the share spent building the
figure (rbplab.viz.plots) versus copying it into the shown one (widgets.sync_figure).
"""

from __future__ import annotations

import argparse
import statistics
import time

from rbplab.viz import widgets


def _study(synthetic: bool, cache_dir: str | None):
    from rbplab.grid import Grid
    from rbplab.study import load_study, synthetic_study

    if synthetic:
        return synthetic_study(corpora=("humaneval", "legal-standin", "prose", "wikipedia"))
    return load_study(Grid.from_names("micro"), cache_dir=cache_dir)


def _time(calls) -> list[float]:
    times = []
    for call in calls:
        start = time.perf_counter()
        call()
        times.append(1000 * (time.perf_counter() - start))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", action="store_true", help="a made-up study instead of the demo's")
    parser.add_argument("--cache-dir", help="the demo cache (default $RBPLAB_CACHE or ~/.cache/rbplab)")
    args = parser.parse_args()
    start = time.perf_counter()
    study = _study(args.synthetic, args.cache_dir)
    opened = time.perf_counter() - start
    print(f"study: {len(study.runs)} runs, {len(study.corpora)} corpora, opened in {opened:.1f} s")
    ks = [2, 5, 10, 50, 100, 500, 1000]
    for live in (True, False):
        views = {
            "ScalingView.set_k": (widgets.ScalingView(study, live=live), "set_k", ks),
            "EmergenceView.set_n": (
                widgets.EmergenceView(study, n=10, live=live),
                "set_n",
                [2, 5, 20, 50, 100],
            ),
            "EmergenceView.set_k": (widgets.EmergenceView(study, n=10, live=live), "set_k", ks),
            "KSweepView.set_k": (widgets.KSweepView(study, live=live), "set_k", ks),
            "RankDistributionView.set_corpus": (
                widgets.RankDistributionView(study, live=live),
                "set_corpus",
                study.corpora[1:] + study.corpora[:1],
            ),
        }
        print(f"\n{'live FigureWidget' if live else 'headless Figure'}: ms per callback (median / max)")
        for name, (view, method, values) in views.items():
            callback = getattr(view, method)
            step = _time([lambda c=callback, v=v: c(v) for v in values])
            build = _time([view.build for _ in values[:3]])
            print(
                f"  {name:34s} {statistics.median(step):6.0f} / {max(step):6.0f}"
                f"   (building the figure: {statistics.median(build):.0f})"
            )


if __name__ == "__main__":
    main()
