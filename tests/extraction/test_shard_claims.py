"""The shard loop (`compute_shards`) and a shard whose claim another process holds: the loop goes
on with the other shards, then waits for that claim, and ends with every shard and the entry
finalised, whether the other process wrote the shard (it is not computed again) or gave it up (it
is computed here). Without the wait, the call would end without that shard and without a manifest.

The other process is a plain Python process that takes the shard's claim (the same lock file and
the same `filelock`), waits until this process has written every other shard (so the loop is
surely past that shard and waiting), then writes it (a copy of a reference extraction's, which is
keyed the same) or not, and releases the claim."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.studies import shard_bytes

from rbplab.extraction.pipeline import extract_plan, load_scorer
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.scoring import compute_shards
from rbplab.store import CacheEntry

SETTINGS = {"context_length": 16, "shard_tokens": 48}  # the tiny corpus in several shards
HELD = 1  # the shard the other process holds

OTHER_PROCESS = r"""
import os, shutil, sys, time
from pathlib import Path
from filelock import FileLock

claim, entry_lock, held, entry_dir, reference, name, mode, *others = sys.argv[1:]
with FileLock(claim):
    Path(held).touch()
    deadline = time.monotonic() + 120
    while not all(os.path.exists(p) for p in others):
        if time.monotonic() > deadline:
            sys.exit("the other shards never appeared")
        time.sleep(0.05)
    time.sleep(0.5)  # the loop is past them and waiting on this claim
    if mode == "writes":
        with FileLock(entry_lock):
            for file in (name, name + ".sha256"):  # the shard, then its checksum record
                temporary = Path(entry_dir) / f".{file}.tmp"
                shutil.copyfile(Path(reference) / file, temporary)
                os.replace(temporary, Path(entry_dir) / file)
"""


@pytest.fixture(scope="module")
def reference(gpt2_dir, tiny_corpus, tmp_path_factory):
    """(plan, the cache of a whole extraction of it): the shards the other process copies."""
    plan = plan_extraction(str(gpt2_dir), tiny_corpus, **SETTINGS)
    root = tmp_path_factory.mktemp("reference")
    extract_plan(plan, cache_dir=root, progress=False)
    return plan, root


def _checksum(entry: CacheEntry, index: int) -> Path:
    path = entry.shard_path(index)
    return path.with_name(path.name + ".sha256")


@pytest.mark.parametrize("mode", ["writes", "gives up"])
def test_a_shard_claimed_elsewhere_is_waited_for_and_the_entry_finalised(reference, tmp_path, mode):
    plan, reference_root = reference
    n = len(plan.shards)
    assert n >= 3, "the held shard must have shards after it"
    entry = CacheEntry(tmp_path / "cache", plan.key_spec)
    claim = entry.root / "locks" / f"{entry.key}.shard-{HELD:05d}.lock"
    claim.parent.mkdir(parents=True)
    held = tmp_path / "held"
    others = [str(_checksum(entry, i)) for i in range(n) if i != HELD]
    source = CacheEntry(reference_root, plan.key_spec)
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, str(claim), str(entry.lock_path), str(held), str(entry.path)]
        + [str(source.path), entry.shard_path(HELD).name, mode, *others]
    )
    try:
        deadline = time.monotonic() + 60
        while not held.exists():  # the claim is taken before the loop starts
            assert other.poll() is None and time.monotonic() < deadline, "the other process did not start"
            time.sleep(0.05)
        work = compute_shards([(plan, entry)], range(n), get_scorer=load_scorer)
        assert other.wait(60) == 0
    finally:
        if other.poll() is None:
            other.kill()
    assert work.finalized and entry.is_complete()
    assert entry.completed_shards() == set(range(n))
    # The held shard was computed here only when the other process gave it up.
    assert work.shards == (n - 1 if mode == "writes" else n)
    cached = {Path(k).name: v for k, v in shard_bytes(entry.root).items()}
    expected = {Path(k).name: v for k, v in shard_bytes(reference_root).items()}
    assert cached == expected  # every shard as the reference extraction scored it
