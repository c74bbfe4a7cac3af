"""Compare two report folders (`rbplab report` or `rbplab demo` output) item by item: every table
(`*.csv`, by its bytes), every saved figure (`*.plotly.json`) and every plotly figure an executed
notebook displayed (offline explorers included, as JSON). Prints how many items each folder holds
and which differ; exits 1 when any item differs or is missing from one side.

    python benchmarks/compare_reports.py reports/before reports/after
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

PLOTLY = "application/vnd.plotly.v1+json"


def items(root: Path) -> dict[str, str]:
    """Item name -> sha256 of its canonical content."""
    out: dict[str, str] = {}

    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()

    for notebook in sorted(root.glob("*.ipynb")):
        for i, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
            for j, output in enumerate(cell.get("outputs", [])):
                if PLOTLY in output.get("data", {}):
                    out[f"{notebook.name} cell {i} output {j}"] = digest(output["data"][PLOTLY])
    for figure in sorted(root.rglob("*.plotly.json")):
        out[str(figure.relative_to(root))] = digest(json.loads(figure.read_text(encoding="utf-8")))
    for table in sorted(root.rglob("*.csv")):
        out[str(table.relative_to(root))] = hashlib.sha256(table.read_bytes()).hexdigest()
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    for folder in argv:
        if not Path(folder).is_dir():
            print(f"compare_reports: {folder} is not a folder", file=sys.stderr)
            return 2
    try:
        before, after = (items(Path(a)) for a in argv)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        print(f"compare_reports: cannot read a report file ({type(err).__name__}: {err})", file=sys.stderr)
        return 2
    for folder, side in zip(argv, (before, after), strict=True):
        if not side:
            print(f"compare_reports: {folder} holds no tables or figures (a report folder?)", file=sys.stderr)
            return 2
    kinds = {"tables": ".csv", "figures": ".plotly.json"}
    for name, side in (("before", before), ("after", after)):
        counts = {k: sum(n.endswith(s) for n in side) for k, s in kinds.items()}
        shown = sum("cell" in n for n in side)
        tables, figures = counts["tables"], counts["figures"]
        print(f"{name}: {tables} tables, {figures} saved figures, {shown} displayed figures")
    differ = sorted(n for n in before.keys() & after.keys() if before[n] != after[n])
    missing = sorted(before.keys() ^ after.keys())
    print(f"{len(differ)} differ, {len(missing)} on one side only")
    for n in differ + missing:
        print("  ", n)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
