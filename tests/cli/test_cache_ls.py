"""`rbplab cache ls`: revision, step and settings columns, filters, --group, and a closed pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from helpers.cli import run

from rbplab.store.cache.entry import CacheEntry

TOKENS = pd.DataFrame(
    {
        "doc_index": [0, 0, 0],
        "doc_id": ["a", "a", "a"],
        "position": [1, 2, 3],
        "target_id": [3, 4, 5],
        "n_greater": [0, 5, 1],
        "n_equal": [1, 1, 1],
        "nll": [0.1, 2.0, 0.7],
    }
)


def spec(model: str, corpus: str, revision: str | None, max_tokens: int | None) -> dict:
    return {
        "model": {"name": model, "revision": revision},
        "corpus": {"name": corpus},
        "max_tokens": max_tokens,
        "windows": {"context_length": 32},
    }


def entry(root, model, corpus, revision=None, max_tokens=None, step=None, complete=True, rows=3):
    e = CacheEntry(root, spec(model, corpus, revision, max_tokens))
    with e.lock():
        e.write_shard(0, TOKENS.iloc[:rows])
        if complete:
            e.finalize({"vocab_size": 10, **({"training": {"step": step}} if step is not None else {})})
    return e


@pytest.fixture
def cache(tmp_path):
    """m-small: two checkpoints and its final weights on 'prose' (cap 2), and final weights without
    a cap; m-large: final weights on 'prose' and 'code', and one incomplete entry."""
    entry(tmp_path, "m-small", "prose", "step-10", 2, step=10, rows=2)
    entry(tmp_path, "m-small", "prose", "step-200", 2, step=200, rows=2)
    entry(tmp_path, "m-small", "prose", None, 2, step=400, rows=2)
    entry(tmp_path, "m-small", "prose")
    entry(tmp_path, "m-large", "prose")
    entry(tmp_path, "m-large", "code")
    entry(tmp_path, "m-large", "wiki", complete=False, rows=1)
    return tmp_path


def ls(capsys, cache, *argv):
    return run(capsys, "cache", "ls", "--cache-dir", cache, *argv)


def as_json(out: str) -> pd.DataFrame:
    return pd.DataFrame(json.loads(out))


def test_columns_tell_revisions_and_settings_apart(capsys, cache):
    status, out, _ = ls(capsys, cache, "--format", "json")
    table = as_json(out)
    assert status == 0 and len(table) == 7
    small = table[table["model"] == "m-small"].set_index("revision", drop=False)
    assert set(small["revision"].dropna()) == {"step-10", "step-200"}
    assert small.loc["step-10", "step"] == 10 and small.loc["step-200", "step"] == 200
    assert sorted(small["max_tokens"].fillna(-1).astype(int)) == [-1, 2, 2, 2]
    assert set(table["context_length"]) == {32}
    partial = table[table["corpus"] == "wiki"].iloc[0]
    assert partial["status"] == "incomplete" and partial["n_tokens"] == 1 and pd.isna(partial["step"])
    status, out, _ = ls(capsys, cache)
    # the terminal's one table display: readable headers, the identifier in a legend below
    header = out.splitlines()[1].replace("max tokens", "max_tokens").split()
    assert header == [
        "key", "model", "revision", "step", "corpus", "max_tokens", "tokens", "status", "size", "created"
    ]  # fmt: skip
    assert out.splitlines()[-1] == "columns: max tokens = max_tokens"
    rows = [line.split() for line in out.splitlines()[2:]]
    assert ["m-small", "step-200", "200", "prose", "2", "2"] in [r[1:7] for r in rows]
    assert ["m-large", "final", "prose", "all", "3"] in [r[1:3] + r[3:6] for r in rows]


def test_entries_are_listed_by_model_corpus_and_settings(capsys, cache):
    """Not by creation time (the fixture makes m-small's first): one model's entries stand together,
    its corpora in order, each cap's checkpoints in training order with the final weights last."""
    status, out, _ = ls(capsys, cache, "--format", "json")
    table = as_json(out)
    assert status == 0
    listed = list(
        zip(table["model"], table["corpus"], table["max_tokens"].fillna(-1).astype(int), strict=True)
    )
    assert [
        (m, c, cap, r) for (m, c, cap), r in zip(listed, table["revision"].fillna("final"), strict=True)
    ] == [
        ("m-large", "code", -1, "final"),
        ("m-large", "prose", -1, "final"),
        ("m-large", "wiki", -1, "final"),
        ("m-small", "prose", 2, "step-10"),
        ("m-small", "prose", 2, "step-200"),
        ("m-small", "prose", 2, "final"),
        ("m-small", "prose", -1, "final"),
    ]


def test_filters_are_patterns_and_combine(capsys, cache):
    status, out, _ = ls(capsys, cache, "--model", "M-S*", "--revision", "step*", "--format", "json")
    table = as_json(out)
    assert status == 0 and sorted(table["revision"]) == ["step-10", "step-200"]
    _, out, _ = ls(capsys, cache, "--revision", "final", "--max-tokens", "all", "--format", "json")
    table = as_json(out)
    assert sorted(zip(table["model"], table["corpus"], strict=True)) == [
        ("m-large", "code"),
        ("m-large", "prose"),
        ("m-large", "wiki"),
        ("m-small", "prose"),
    ]
    _, out, _ = ls(capsys, cache, "--status", "incomplete", "--format", "json")
    assert as_json(out)["corpus"].tolist() == ["wiki"]
    for corpora in (["-c", "code", "prose"], ["-c", "code", "-c", "prose"], ["--corpus=code", "-c", "prose"]):
        _, out, _ = ls(capsys, cache, *corpora, "--model", "m-large", "--format", "csv")
        assert sorted(pd.read_csv(pd.io.common.StringIO(out))["corpus"]) == ["code", "prose"], corpora
    _, out, _ = ls(
        capsys, cache, "-m", "m-large", "-m", "m-small", "--status", "incomplete", "--format", "csv"
    )
    assert pd.read_csv(pd.io.common.StringIO(out))["corpus"].tolist() == ["wiki"]


def test_a_pattern_matching_nothing_suggests_names(capsys, cache):
    status, out, err = ls(capsys, cache, "--model", "m-smal")
    assert status == 0 and "(none)" in out
    assert err.strip() == "rbplab: no entry has model 'm-smal' (did you mean 'm-small'?)"
    status, _, err = ls(capsys, cache, "--family", "micr")
    assert (
        status == 1
        and "unknown model family 'micr'; known families" in err
        and "(did you mean 'micro'?)" in err
    )


def test_group_folds_revisions(capsys, cache):
    status, out, _ = ls(capsys, cache, "--group", "--format", "json")
    groups = as_json(out)
    assert status == 0
    small = groups[(groups["model"] == "m-small") & (groups["max_tokens"] == 2)].iloc[0]
    assert (small["entries"], small["revisions"], small["complete"]) == (3, 3, 3)
    assert (small["step_min"], small["step_max"], small["tokens"]) == (10, 400, 6)
    assert len(groups) == 5  # m-small capped, m-small uncapped, m-large x 3 corpora
    _, out, _ = ls(capsys, cache, "--group", "model", "--format", "json")
    by_model = as_json(out).set_index("model")
    assert by_model.loc["m-large", "entries"] == 3 and by_model.loc["m-large", "complete"] == 2
    assert by_model.loc["m-large", "tokens"] == 3 + 3 + 1
    _, out, _ = ls(capsys, cache, "--group", "model", "revision", "--model", "m-small")
    lines = out.splitlines()[2:]
    assert [line.split()[1] for line in lines] == ["step-10", "step-200", "final"]  # training order
    assert lines[-1].split()[2:4] == ["2", "2/2"]  # the final weights: capped and uncapped entries


# A listing far larger than a pipe's buffer (64 KB), so the writer meets the closed pipe.
BIG_LISTING = """
import sys
import pandas as pd
from rbplab.cli import app
from rbplab.store.cache import admin

def listing(root):
    n = 5000
    return pd.DataFrame({
        "key": ["%064x" % i for i in range(n)], "model": "m", "revision": None, "step": 1,
        "corpus": "c", "max_tokens": None, "context_length": 32, "n_tokens": 3, "head": "fp32",
        "settled_rows": 0, "complete": True,
        "status": "complete", "size_bytes": 100, "created": pd.Timestamp("2025-01-01", tz="UTC"),
        "path": "p",
    }).astype({
    "step": "Int64", "max_tokens": "Int64", "context_length": "Int64", "n_tokens": "Int64",
    "settled_rows": "Int64",
})

admin.list_entries = listing
sys.exit(app.main(["cache", "ls"] + sys.argv[1:]))
"""


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_closed_pipe_is_not_an_error(tmp_path, fmt):
    (tmp_path / "listing.py").write_text(BIG_LISTING)
    env = {**os.environ, "RBPLAB_CACHE": str(tmp_path / "cache")}
    env.pop("RBPLAB_DEBUG", None)
    script = f"set -o pipefail; {sys.executable} listing.py --format {fmt} | head -n 2"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert len(done.stdout.splitlines()) == 2
    assert done.stderr == ""  # no "Broken pipe", no traceback
    # 141 is what pipefail reports for a writer stopped by SIGPIPE; a single large write that the
    # kernel reports as complete before the reader left ends normally.
    assert done.returncode in (0, 141)
