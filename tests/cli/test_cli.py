"""The `rbplab` CLI, in-process through main(argv) and once as a real subprocess."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.cli import run

from rbplab.cli import app as cli
from rbplab.store import files as cache_location
from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry

SPEC = {"model": {"name": "tiny/model"}, "corpus": {"name": "toy"}}


def make_entry(root, spec=SPEC, complete=True):
    entry = CacheEntry(root, spec)
    frame = pd.DataFrame(
        {
            "doc_index": [0, 0],
            "doc_id": ["a", "a"],
            "position": [1, 2],
            "target_id": [3, 4],
            "n_greater": [0, 5],
            "n_equal": [1, 1],
            "nll": [0.1, 2.0],
        }
    )
    with entry.lock():
        entry.write_shard(0, frame)
        if complete:
            entry.finalize({"vocab_size": 10})
    return entry


def test_families_summary_and_members(capsys):
    status, out, _ = run(capsys, "families")
    assert status == 0
    for family in ("pythia", "gpt2", "opt", "qwen2.5"):
        assert family in out
    status, out, _ = run(capsys, "families", "gpt2", "--format", "csv")
    table = pd.read_csv(pd.io.common.StringIO(out))
    assert status == 0 and table["model"].tolist() == ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]
    assert table.loc[0, "S"] == 85_056_000


def test_unknown_family_is_one_line_error(capsys):
    status, out, err = run(capsys, "families", "llama")
    assert status == 1 and out == ""
    assert err.startswith("rbplab: error: unknown model family 'llama'") and "pythia" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_corpora_lists_hub_loaders(capsys):
    status, out, _ = run(capsys, "corpora", "--format", "json")
    names = [row["name"] for row in json.loads(out)]
    assert status == 0 and {"hub:wikipedia", "hub:humaneval", "hub:hotpotqa", "hub:auslegal"} <= set(names)


def test_size(capsys, tmp_path):
    status, out, _ = run(capsys, "size", "pythia-160m")
    assert status == 0 and "85,056,000" in out
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "n_layer": 1,
                "n_embd": 8,
                "n_head": 2,
                "vocab_size": 11,
                "n_positions": 16,
            }
        )
    )
    status, out, _ = run(capsys, "size", str(tmp_path))
    assert status == 0 and "transformer.wpe" in out
    status, _, err = run(capsys, "size", "no-such-model")
    assert status == 1 and "unknown model 'no-such-model'" in err


def test_cache_ls_rm_verify(capsys, tmp_path):
    done = make_entry(tmp_path)
    partial = make_entry(tmp_path, {**SPEC, "corpus": {"name": "other"}}, complete=False)
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "ls")
    assert status == 0 and done.key[:12] in out and partial.key[:12] in out and "tiny/model" in out
    status, out, _ = run(capsys, "cache", "ls", "--cache-dir", str(tmp_path), "--format", "json")
    rows = {row["key"]: row for row in json.loads(out)}
    assert rows[done.key]["complete"] and not rows[partial.key]["complete"]
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "verify")
    assert status == 0 and f"ok       {done.key[:12]}" in out
    # damage the complete entry: verify reports it and exits 1, and (issue 10) deletes nothing
    data = bytearray(done.shard_path(0).read_bytes())
    data[10] ^= 0xFF
    done.shard_path(0).write_bytes(bytes(data))
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "verify", done.key[:8])
    assert status == 1 and "CORRUPT" in out and "shard 0 failed its checksum" in out
    assert done.is_complete() and done.shard_path(0).read_bytes() == bytes(data)
    status, _, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm")
    assert status == 1 and "KEY_PREFIX" in err
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", partial.key[:10])
    assert status == 0 and f"removed {partial.key}" in out
    status, _, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "ffffffff")
    assert status == 1 and "no cache entry matches" in err
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "--all")
    assert status == 0 and list_entries(tmp_path).empty


def test_cache_path_follows_env(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RBPLAB_CACHE", str(tmp_path / "c"))
    status, out, _ = run(capsys, "cache", "path")
    assert status == 0 and out.strip() == str(tmp_path / "c")


def test_extract_argument_errors(capsys, tmp_path):
    base = ["extract", "--cache-dir", str(tmp_path / "cache")]
    status, _, err = run(capsys, *base, "--model", "pythia-9000", "--corpus", "wikipedia")
    assert status == 1 and "unknown model 'pythia-9000'" in err and "pythia-160m" in err
    status, _, err = run(capsys, *base, "--model", "gpt2", "--corpus", "no-such-corpus")
    assert status == 1 and "unknown corpus 'no-such-corpus'" in err and "hub:wikipedia" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    status, _, err = run(capsys, *base, "--model", "gpt2", "--corpus", str(empty))
    assert status == 1 and "no non-empty documents" in err
    status, _, err = run(capsys, *base, "--corpus", "wikipedia")
    assert status == 1 and "--model or --family" in err
    status, _, err = run(
        capsys, *base, "--family", "gpt2", "--corpus", "wikipedia", "--context-length", "4096"
    )
    assert status == 1 and "longer than gpt2 supports (1024 tokens)" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, _, err = run(
        capsys, "extract", "--cache-dir", str(blocker / "c"), "-m", "gpt2", "-c", "wikipedia"
    )
    assert status == 1 and str(blocker) in err and "RBPLAB_CACHE" in err
    assert not (tmp_path / "cache").exists() or list_entries(tmp_path / "cache").empty  # nothing was started
    status, out, err = run(capsys, "extract", "--model", "gpt2")
    assert (
        status == 1
        and out == ""
        and err == "rbplab: error: give at least one --corpus (see `rbplab corpora`)\n"
    )


def test_traceback_flag_reraises(tmp_path):
    with pytest.raises(ValueError, match="unknown model family"):
        cli.main(["--traceback", "families", "llama"])


def test_subcommands_can_be_registered(capsys, monkeypatch):
    monkeypatch.setitem(
        cli.COMMANDS,
        "hello",
        cli.Command("say hello", lambda p: p.add_argument("who"), lambda a: print(f"hello {a.who}")),
    )
    status, out, _ = run(capsys, "hello", "world")
    assert status == 0 and out == "hello world\n"
    assert cli.main([]) == 2  # no subcommand: usage, non-zero


def test_console_script_in_subprocess(tmp_path):
    env_cache = {"RBPLAB_CACHE": str(tmp_path)}
    ok = subprocess.run(
        [sys.executable, "-m", "rbplab", "families", "pythia"],
        capture_output=True,
        text=True,
        env={**_env(), **env_cache},
        timeout=120,
    )
    assert ok.returncode == 0 and "pythia-12b" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rbplab", "extract", "-m", "nope", "-c", "wikipedia"],
        capture_output=True,
        text=True,
        env={**_env(), **env_cache},
        timeout=120,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()]  # exactly one line, no traceback
    assert "unknown model 'nope'" in bad.stderr


def _env():
    return {k: v for k, v in os.environ.items() if k != "RBPLAB_DEBUG"}


# ---- extract on a tiny local model ---------------------------------------------------------------


def extract_args(repo, cache_dir, *extra):
    return [
        "extract",
        "--family",
        "micro",
        "--corpus",
        str(repo.parent / "toy.jsonl"),
        "--cache-dir",
        str(cache_dir),
        "--context-length",
        "32",
        "--no-progress",
        *extra,
    ]


def test_extract_family_then_cache_hit(capsys, repo, tmp_path, monkeypatch):
    status, out, _ = run(capsys, *extract_args(repo, tmp_path))
    assert status == 0, out
    label, corpus, tokens, state, key, path = out.strip().split("\t")
    assert (label, corpus, state) == ("micro-t", "toy", "extracted")
    entry = CacheEntry.open(key, tmp_path)
    assert entry.is_complete() and Path(path) == entry.path
    assert tokens == f"{len(entry.read_stats())} tokens"

    import rbplab.extraction.pipeline

    def no_weights(*args, **kwargs):
        raise AssertionError("a cache hit must not load weights")

    monkeypatch.setattr(rbplab.extraction.pipeline, "load_weights", no_weights)
    status, out, _ = run(capsys, *extract_args(repo, tmp_path))
    assert status == 0 and out.strip().split("\t")[3] == "cached"
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "ls", "--format", "csv")
    table = pd.read_csv(pd.io.common.StringIO(out))
    assert table["model"].tolist() == ["micro-t"] and table["complete"].all()


def test_extract_context_longer_than_model(capsys, repo, tmp_path):
    status, out, err = run(capsys, *extract_args(repo, tmp_path, "--context-length", "65"))
    assert status == 1 and out == ""
    assert "longer than micro-t supports (64 tokens)" in err and err.count("\n") == 1
    # a local directory is checked by the extractor itself, from the model's config
    path_args = [
        "extract",
        "-m",
        str(repo / "models" / "micro-t"),
        "-c",
        str(repo.parent / "toy.jsonl"),
        "--cache-dir",
        str(tmp_path),
        "--context-length",
        "100",
        "--no-progress",
    ]
    status, _, err = run(capsys, *path_args)
    assert status == 1 and "64" in err and "Traceback" not in err and err.count("\n") == 1
    assert list_entries(tmp_path).empty


def test_failed_run_leaves_no_complete_entry(capsys, repo, tmp_path, monkeypatch):
    real_replace = os.replace

    def disk_full_for_shards(src, dst):
        if Path(dst).name.startswith("shard-"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(cache_location.os, "replace", disk_full_for_shards)
    status, out, err = run(capsys, *extract_args(repo, tmp_path))
    assert status == 1 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("rbplab: error: no space left on device writing") and "--cache-dir" in last
    assert "Traceback" not in err
    # it failed before finishing a shard: no entry folder (spec.json, half-written files) is left
    assert list_entries(tmp_path).empty and not list(tmp_path.glob("??"))
    monkeypatch.setattr(cache_location.os, "replace", real_replace)
    status, out, _ = run(capsys, *extract_args(repo, tmp_path))  # the same command then completes it
    assert status == 0 and list_entries(tmp_path)["complete"].all()


def test_gguf_without_tokenizer(capsys, gguf_files, tiny_tokenizer_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog. " * 4)
    base = [
        "extract",
        "-m",
        str(gguf_files["bare"]),
        "-c",
        str(corpus),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--context-length",
        "16",
        "--no-progress",
    ]
    status, out, err = run(capsys, *base)
    assert status == 1 and out == ""
    assert "no embedded tokenizer" in err and "--tokenizer" in err and err.count("\n") == 1
    status, out, _ = run(capsys, *base, "--tokenizer", str(tiny_tokenizer_dir))
    assert status == 0 and "extracted" in out


def test_extract_takes_checkpoint_revisions_and_log_spacing(capsys, tmp_path, tiny_tokenizer):
    from helpers.models import DOCUMENTS, build_checkpointed

    model = build_checkpointed(tmp_path / "ckpt", tiny_tokenizer)
    capsys.readouterr()  # transformers' save progress bars
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCUMENTS))
    base = ["extract", "-m", str(model), "-c", str(docs), "--context-length", "32", "--no-progress"]
    base += ["--cache-dir", str(tmp_path / "cache")]
    status, _, err = run(capsys, *base, "--revision", "step-10,step-20")
    assert status == 1 and err.count("\n") == 1
    assert "no revision 'step-20'; available: step-10, step-40" in err
    assert not (tmp_path / "cache").exists() or list_entries(tmp_path / "cache").empty
    status, out, _ = run(capsys, *base, "--revision", "log:2")
    assert status == 0
    labels = [line.split("\t")[0] for line in out.splitlines() if "\t" in line]
    assert labels == [f"{model}@step-10", f"{model}@step-40"]
    status, _, err = run(capsys, *base[:2], "someone/some-model", *base[3:], "--revision", "log:3")
    assert status == 1 and "'log:3' needs a checkpoint schedule" in err
