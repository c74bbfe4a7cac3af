"""A no-op `rbplab extract` (every run cached) answers from plan records as `rbplab fit` does,
without importing torch or transformers (it took 30+ s on a loaded machine to say "cached"); a
run whose entry lost a shard file is not served this way, so extract recomputes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rbplab.cli import app as cli

GRID = ["-m", "micro-1-25K", "-c", "prose", "humaneval", "--max-tokens", "2048", "--no-progress"]

PROBE = """
import json, sys
from rbplab.cli import app
status = app.main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"status": status, "heavy": heavy}))
"""


def _extract(cache) -> tuple[list[list[str]], dict]:
    env = {k: v for k, v in os.environ.items() if k != "RBPLAB_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "extract", *GRID, "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    return [line.split("\t") for line in lines[:-1]], json.loads(lines[-1])


@pytest.mark.slow
def test_a_cached_extract_imports_no_model_code_and_a_damaged_entry_is_recomputed(tmp_path, capsys):
    assert cli.main(["extract", *GRID, "--cache-dir", str(tmp_path)]) == 0
    first = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[3] for row in first] == ["extracted", "extracted"]

    rows, probe = _extract(tmp_path)
    assert probe == {"status": 0, "heavy": []}
    assert rows == [[*row[:3], "cached", *row[4:]] for row in first]  # same runs, keys and paths

    # an entry whose shard file is gone is no hit: extract plans the grid and recomputes it
    (Path(first[1][5]) / "shard-00000.parquet").unlink()
    rows, probe = _extract(tmp_path)
    assert probe["status"] == 0 and "torch" in probe["heavy"]
    assert [row[3] for row in rows] == ["cached", "extracted"]
