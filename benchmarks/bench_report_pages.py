"""Size and headless-Chromium load time of every page of a report, the offline explorers
(rbplab.viz.states) included: what a reader opening the shared folder waits for.

    .venv/bin/python benchmarks/bench_report_pages.py out/report    # a folder `rbplab report` wrote
    .venv/bin/python benchmarks/bench_report_pages.py --synthetic   # 01-04 and 06 on synthetic=True

Load time: from navigation to the page loaded and every plotly figure drawn (each .js-plotly-plot
holds its .main-svg), read as performance.now() in the page, median of `--repeat` fresh browser contexts,
with every non-file request refused (any is printed). The shared plotly.min.js is counted once.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

NOTEBOOKS = ("01_rbp_vs_size", "02_k_sweep", "03_emergence", "04_lognormal", "06_training_dynamics")
DRAWN = """() => document.readyState === 'complete'
    && Array.from(document.querySelectorAll('.js-plotly-plot')).every(e => e.querySelector('.main-svg'))"""
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def _local_only(route, refused: list[str]) -> None:
    if route.request.url.startswith("file:"):
        route.continue_()
    else:
        refused.append(route.request.url)
        route.abort()


def _synthetic_report(folder: Path) -> list[Path]:
    from rbplab.report import execution

    root = Path(__file__).resolve().parents[1] / "notebooks"
    pages = []
    for name in NOTEBOOKS:
        start = time.perf_counter()
        result = execution.execute_notebook(root / f"{name}.ipynb", folder, {"synthetic": True, "n_boot": 10})
        if not result.ok:
            raise SystemExit(f"{name} failed: {result.error}")
        print(f"executed {name} in {time.perf_counter() - start:.1f} s")
        pages.append(Path(result.html))
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="a report folder (its *.html pages but index.html)")
    parser.add_argument(
        "--synthetic", action="store_true", help="execute the notebooks on synthetic=True first"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    if args.synthetic:
        folder = Path(tempfile.mkdtemp(prefix="rbplab-pages-"))
        pages = _synthetic_report(folder)
    elif args.folder:
        folder = Path(args.folder).resolve()
        pages = sorted(p for p in folder.glob("*.html") if p.name != "index.html")
    else:
        raise SystemExit("give a report folder or --synthetic")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    total = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        for page_path in pages:
            times, remote = [], []
            for _ in range(args.repeat):
                context = browser.new_context(viewport={"width": 1200, "height": 900})
                context.route("**/*", lambda r, refused=remote: _local_only(r, refused))
                page = context.new_page()
                page.goto(page_path.as_uri())
                page.wait_for_function(DRAWN, timeout=120_000)
                times.append(page.evaluate("performance.now()") / 1000)
                figures = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
                context.close()
            size = page_path.stat().st_size
            total += size
            print(
                f"{page_path.name}: {size / 1e6:.2f} MB, {figures} figures, "
                f"load {statistics.median(times):.2f} s (median of {args.repeat}), "
                f"remote requests: {len(remote)}"
            )
        browser.close()
    plotly_js = folder / "plotly.min.js"
    shared = f"; shared plotly.min.js {plotly_js.stat().st_size / 1e6:.2f} MB" if plotly_js.exists() else ""
    print(f"all pages {total / 1e6:.2f} MB{shared}")


if __name__ == "__main__":
    main()
