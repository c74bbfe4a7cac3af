"""Session fixtures built once per test run, also when pytest-xdist runs it in several workers.

Each xdist worker is a pytest session of its own, so a plain session fixture is built once per
worker: scoring the micro-suite twice on a two-core machine costs a minute. Here the first worker
to ask builds into a folder shared by the run and the others wait on a file lock and reuse it.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def in_xdist_worker() -> bool:
    """Whether this process is a pytest-xdist worker (xdist sets the variable before conftest loads)."""
    return "PYTEST_XDIST_WORKER" in os.environ


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """`build(folder)` run once per test run into an empty folder; its (pickled) value to every worker.

    A build that raises (a skip included) records nothing, so the next worker tries again and
    meets the same failure or skip itself.
    """
    if not in_xdist_worker():
        return build(tmp_path_factory.mktemp(name))
    # Every worker's base temp sits in the run's own folder (pytest-N/popen-gwK): its parent is shared.
    root = tmp_path_factory.getbasetemp().parent / f"once-{name}"
    value = root.parent / f"once-{name}.pickle"
    with FileLock(f"{root}.lock"):
        if value.exists():
            return pickle.loads(value.read_bytes())
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        built = build(root)
        value.write_bytes(pickle.dumps(built))
        return built
