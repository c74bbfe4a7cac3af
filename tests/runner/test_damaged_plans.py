"""`rbplab plan` and `rbplab run` call the same entries cached, and look before they do: a complete
entry with a shard file deleted or truncated, its .sha256 record gone or its manifest unreadable is
shown by `plan` as damaged with the shards the run recomputes (and the plan writes nothing: every
file of the cache byte for byte as it was), and `run` recomputes exactly those."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from helpers.extraction import extract_run
from helpers.models import DOCUMENTS
from helpers.studies import shard_bytes

from rbplab.catalog.corpora import open_corpus
from rbplab.cli.app import main
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.store import CacheEntry

SETTINGS = {"context_length": 16, "shard_tokens": 48}
DAMAGED = 1  # the shard damaged


def _delete(entry: CacheEntry) -> None:
    entry.shard_path(DAMAGED).unlink()


def _truncate(entry: CacheEntry) -> None:
    path = entry.shard_path(DAMAGED)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _drop_checksum(entry: CacheEntry) -> None:
    entry.shard_path(DAMAGED).with_name(entry.shard_path(DAMAGED).name + ".sha256").unlink()


def _garble_manifest(entry: CacheEntry) -> None:
    entry.manifest_path.write_text("{")


# (damage, the shards a run recomputes, what the plan's note says first)
DAMAGE = {
    "shard deleted": (_delete, {DAMAGED}, f"shard {DAMAGED} is missing or unreadable"),
    "shard truncated": (_truncate, {DAMAGED}, f"shard {DAMAGED} has"),
    "checksum record deleted": (_drop_checksum, {DAMAGED}, f"shard {DAMAGED} has no checksum file"),
    "manifest unreadable": (_garble_manifest, set(), "its manifest is unreadable"),
}


@pytest.fixture
def cached(gpt2_dir, tmp_path) -> tuple[Path, Path, str, dict[str, bytes]]:
    """(cache, corpus file, key, the entry's shards by path): one complete entry of several shards."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(text for _, text in DOCUMENTS) + "\n")
    cache = tmp_path / "cache"
    result = extract_run(str(gpt2_dir), open_corpus(str(corpus)), cache_dir=cache, progress=False, **SETTINGS)
    assert len(result.manifest["shards"]) > DAMAGED + 1
    return cache, corpus, result.key, shard_bytes(cache)


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under `root`: its bytes (None for a folder) and modification time."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes(), p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def plan_rows(gpt2_dir: Path, corpus: Path, cache: Path) -> list[dict]:
    argv = ["plan", "-m", str(gpt2_dir), "-c", str(corpus), "--cache-dir", str(cache), "--no-probe"]
    argv += ["--context-length", "16", "--shard-tokens", "48", "--format", "json"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())["entries"]


@pytest.mark.parametrize("damage", DAMAGE)
def test_plan_shows_the_damage_and_writes_nothing(cached, gpt2_dir, damage):
    cache, corpus, key, _ = cached
    entry = CacheEntry.open(key, cache)
    rows = [int(record["rows"]) for record in entry.manifest()["shards"]]
    harm, redo, said = DAMAGE[damage]
    harm(entry)
    before = snapshot(cache)
    (row,) = plan_rows(gpt2_dir, corpus, cache)
    assert snapshot(cache) == before  # a plan writes nothing, deletes nothing
    assert row["key"] == key and row["state"] == "damaged"
    assert row["note"].startswith(f"damaged: {said}")
    listed = ", ".join(map(str, sorted(redo))) or "no shard"
    assert f"run recomputes {'shard ' if redo else ''}{listed}" in row["note"]
    assert row["tokens_to_score"] == sum(rows[i] for i in redo)


# (A run already recomputed an entry whose manifest it could not read.)
@pytest.mark.parametrize("damage", [name for name in DAMAGE if "shard" in name or "checksum" in name])
def test_run_recomputes_what_the_plan_showed(cached, gpt2_dir, damage):
    cache, corpus, key, pristine = cached
    entry = CacheEntry.open(key, cache)
    rows = [int(record["rows"]) for record in entry.manifest()["shards"]]
    harm, redo, _ = DAMAGE[damage]
    harm(entry)
    grid = Grid.from_names([str(gpt2_dir)], [open_corpus(str(corpus))], **SETTINGS)
    with pytest.warns(UserWarning, match=f"cache entry {key[:12]}"):
        run = run_study(grid, cache_dir=cache, progress=False)
    assert run.ok and list(run.table["key"]) == [key]
    (state,) = run.table["state"]
    assert state == "computed" and int(run.table["computed"].iloc[0]) == sum(rows[i] for i in redo)
    assert entry.is_complete() and shard_bytes(cache) == pristine
    (row,) = plan_rows(gpt2_dir, corpus, cache)
    assert row["state"] == "cached" and row["tokens_to_score"] == 0


@pytest.mark.parametrize("damage", [name for name in DAMAGE if "shard" in name or "checksum" in name])
def test_extract_recomputes_it_too(cached, gpt2_dir, damage):
    """`extract` makes the same check before it calls an entry a hit."""
    cache, corpus, key, pristine = cached
    DAMAGE[damage][0](CacheEntry.open(key, cache))
    with pytest.warns(UserWarning, match=f"cache entry {key[:12]}"):
        again = extract_run(
            str(gpt2_dir), open_corpus(str(corpus)), cache_dir=cache, progress=False, **SETTINGS
        )
    assert again.key == key and not again.from_cache and shard_bytes(cache) == pristine
