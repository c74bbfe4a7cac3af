"""A command that waits on another process's lock says so, once, before it waits: `rbplab cache
repair` used to wait in silence for as long as the cache index lock was held."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from helpers.cli import run

from rbplab.cli import app as cli

# Holds a file lock as the cache's writers do (filelock's flock), until its stdin closes.
HOLDER = """
import sys
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def index_lock_held(tmp_path):
    """The cache index lock of a cache at tmp_path / "cache", held by a second process; yields
    (lock path, release), release letting the holder exit."""
    root = tmp_path / "cache"
    path = root / "locks" / "index.lock"
    path.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        yield path, holder.stdin.close
    finally:
        if holder.stdin and not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=30)


def test_repair_says_it_waits_for_the_index_lock(capsys, tmp_path, index_lock_held):
    path, release = index_lock_held
    result: dict = {}
    command = threading.Thread(
        target=lambda: result.update(
            status=cli.main(["cache", "--cache-dir", str(tmp_path / "cache"), "repair"])
        )
    )
    command.start()
    said = ""
    deadline = time.monotonic() + 60
    while "waiting" not in said and time.monotonic() < deadline:
        time.sleep(0.05)
        said += capsys.readouterr().err
    assert command.is_alive(), result  # still waiting: the line came before the lock was free
    release()
    command.join(timeout=60)
    out, err = capsys.readouterr()
    said += err
    assert not command.is_alive() and result["status"] == 0
    assert said == (
        f"rbplab: warning: waiting for a lock another process holds ({path}); this goes on when it is "
        "released\n"
    )
    assert "index    0 row(s)" in out


def test_a_free_lock_is_taken_without_a_word(capsys, tmp_path):
    (tmp_path / "cache").mkdir()
    status, out, err = run(capsys, "cache", "--cache-dir", tmp_path / "cache", "repair")
    assert status == 0 and err == "" and "index    0 row(s)" in out
