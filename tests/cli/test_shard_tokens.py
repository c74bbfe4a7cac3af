"""`--shard-tokens` cuts an entry; it does not change a rank. It stays in the cache key (the key
names the shard files, which resuming and the cache's rules read by their cut), and a lookup that
asks no shard size (`rbplab fit`, `report`, `load_study`, a no-op `extract`) takes the run cut at
any size instead of calling it missing and offering to recompute identical ranks."""

from __future__ import annotations

import numpy as np
import pytest

import rbplab
from rbplab.cli import app as cli
from rbplab.grid import Grid
from rbplab.study import MissingRunsError
from rbplab.study.lookup import absent_runs, resolve_entries

MODELS = ["micro-1-25K", "micro-2-85K"]
MAX_TOKENS = 3000


def _extract(cache, *extra: str) -> list[list[str]]:
    argv = ["extract", "-m", *MODELS, "-c", "humaneval", "--max-tokens", str(MAX_TOKENS), "--no-progress"]
    assert cli.main([*argv, "--cache-dir", str(cache), *extra]) == 0
    return []


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    """The same runs extracted at the default cut and at 1,024 tokens per shard."""
    default, small = tmp_path_factory.mktemp("default"), tmp_path_factory.mktemp("small")
    _extract(default)
    _extract(small, "--shard-tokens", "1024")
    return default, small


def _grid(**settings) -> Grid:
    return Grid.from_names(MODELS, ["humaneval"], max_tokens=MAX_TOKENS, **settings)


def test_the_key_holds_the_cut_but_a_lookup_takes_any(caches, capsys):
    default, small = caches
    capsys.readouterr()
    assert absent_runs(_grid(), small) is None  # the report's and load_study's first check
    resolved = resolve_entries(_grid(), small)
    specs = [r.entry.spec for r in resolved]
    assert all(r.entry.is_complete() for r in resolved)
    assert [s["windows"]["shard_tokens"] for s in specs] == [1024, 1024]
    keys = {r.entry.key for r in resolve_entries(_grid(), default)}
    assert keys.isdisjoint(r.entry.key for r in resolved)  # another cut, another key
    # the lookup recorded what it found: the next one needs no planning
    assert [r.plan for r in resolve_entries(_grid(), small)] == [None, None]

    # the same ranks, whatever the cut
    read = {cache: rbplab.load_study(_grid(), cache_dir=cache) for cache in caches}
    points = [
        read[cache].points([1, 10, 100]).sort_values(["model", "k"])["rbp"].to_numpy() for cache in caches
    ]
    np.testing.assert_array_equal(points[0], points[1])

    # the CLI: fit finds the runs, and a no-op extract answers "cached" without recomputing
    assert (
        cli.main(
            [
                "fit",
                "-m",
                *MODELS,
                "-c",
                "humaneval",
                "--max-tokens",
                str(MAX_TOKENS),
                "--cache-dir",
                str(small),
            ]
        )
        == 0
    )
    capsys.readouterr()
    _extract(small)
    states = [line.split("\t")[3] for line in capsys.readouterr().out.splitlines()]
    assert states == ["cached", "cached"]


def test_a_cut_asked_for_is_looked_up_as_asked(caches):
    _, small = caches
    missing = absent_runs(_grid(shard_tokens=2048), small)
    assert missing is not None and "shard_tokens (cached 1024, asked 2048)" in str(missing)
    with pytest.raises(MissingRunsError):
        rbplab.load_study(_grid(shard_tokens=2048), cache_dir=small)
    assert all(r.entry.is_complete() for r in resolve_entries(_grid(shard_tokens=1024), small))
