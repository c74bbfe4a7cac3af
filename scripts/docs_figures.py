"""The static figures of the docs' notebooks page (docs/figures/): each notebook's headline figure
on the synthetic study (made-up models with a known lognormal law; no cache, no model runs), drawn
by the notebook itself, and exported as PNG at screen size.

    .venv/bin/python scripts/docs_figures.py            # writes docs/figures/<notebook>.png

Each notebook runs through papermill with `synthetic = True` and an `output_dir`, where it saves
its figures (`rbplab.report.save_figure`); the one named `headline` (the figure the report's index
shows) is exported with `rbplab.viz.save(..., size="screen")`. Needs the `notebooks` and `export`
extras and a Chromium for kaleido (Debian: apt-get install chromium). Notebook 05 (extraction)
draws no figure. Run it again after a change to a notebook's headline figure; commit the PNGs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = (
    "01_rbp_vs_size",
    "02_k_sweep",
    "03_emergence",
    "04_lognormal",
    "06_training_dynamics",
    "07_beyond_the_paper",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures", help="where the PNGs go")
    args = parser.parse_args(argv)
    import plotly.io as pio

    from rbplab.report.handoff import FIGURE_SUFFIX
    from rbplab.viz.export import save_many

    papermill = Path(sys.executable).parent / "papermill"
    figures, paths = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for notebook in NOTEBOOKS:
            output_dir = Path(tmp) / notebook
            source, executed = ROOT / "notebooks" / f"{notebook}.ipynb", Path(tmp) / f"{notebook}.ipynb"
            command = [
                str(papermill), str(source), str(executed), "--cwd", tmp,
                "-p", "synthetic", "True", "-p", "output_dir", str(output_dir),
            ]  # fmt: skip
            subprocess.run(command, check=True, cwd=tmp)
            headline = output_dir / f"headline{FIGURE_SUFFIX}"
            if not headline.is_file():
                raise SystemExit(f"{notebook}: saved no headline figure under {output_dir}")
            figures.append(pio.read_json(headline))
            paths.append(args.out / f"{notebook}.png")
        args.out.mkdir(parents=True, exist_ok=True)
        for path in save_many(figures, paths, size="screen", scale=1):
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
