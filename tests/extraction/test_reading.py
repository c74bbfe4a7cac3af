"""`load_stats` is reachable without model code: importing it imports neither torch nor transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Run in a fresh interpreter: the test session itself has imported torch long ago.
PROBE = """
import importlib, json, sys
module = importlib.import_module(sys.argv[1])
assert callable(module.load_stats)
print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)))
"""


@pytest.mark.parametrize("module", ["rbplab", "rbplab.extraction", "rbplab.extraction.reading"])
def test_load_stats_imports_no_model_code(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
