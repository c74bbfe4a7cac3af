"""A small study for the runner tests: 3 tiny models x 2 corpora in shards of 40 tokens."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.models import DOCUMENTS

SETTINGS = {"context_length": 32, "shard_tokens": 40}


def write_study(tmp_path: Path, gpt2_dir: Path, neox_dir: Path, llama_dir: Path) -> Path:
    """3 tiny models x 2 corpora, shards of 40 tokens (several shards and units per entry)."""
    for name, docs in (("first", DOCUMENTS[:3]), ("second", DOCUMENTS[3:])):
        lines = [json.dumps({"id": i, "text": t}) for i, t in docs]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    models = ", ".join(json.dumps(str(p)) for p in (gpt2_dir, neox_dir, llama_dir))
    settings = "\n".join(f"{k} = {v}" for k, v in SETTINGS.items())
    path = tmp_path / "study.toml"
    path.write_text(
        f'models = [{models}]\ncorpora = ["first.jsonl", "second.jsonl"]\n[settings]\n{settings}\n'
    )
    return path


def shard_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("shard-*.parquet"))}


def summary_bytes(root: Path) -> dict[str, bytes]:
    """Every entry's summary file, by path (the store writes one when an entry is finalised)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("summary-v*.parquet"))}


def micro_present() -> bool:
    """Whether the micro-suite family is registered with its weights in data/ (the e2e reports
    score it; without it they are skipped)."""
    from rbplab.catalog import registry

    try:
        members = registry.family_models("micro")
    except (registry.UnknownFamilyError, FileNotFoundError):
        return False
    return bool(members["source"].map(lambda s: Path(registry.source_location(s)).exists()).all())


# The micro-suite as the e2e reports read it: the final models on prose and humaneval and 3
# checkpoints per size on prose (what `make demo` scores, smaller). Built once per session by the
# `micro_cache_template` fixture (tests/conftest.py); `WIDE_FINALS` / `WIDE_CHECKPOINTS` add the
# other bundled corpora and humaneval's checkpoints for `micro_cache_wide_template`.
MICRO_MAX_TOKENS = 300
MICRO_TWO_CORPORA = ["prose", "humaneval"]  # as the README's `rbplab report -c prose humaneval`
MICRO_FINALS = {
    "families": ["micro"],
    "corpora": MICRO_TWO_CORPORA,
    "settings": {"max_tokens": MICRO_MAX_TOKENS},
}
MICRO_CHECKPOINTS = {**MICRO_FINALS, "corpora": ["prose"], "revisions": "log:3"}


def wide_tables() -> tuple[dict, dict]:
    """The final models on every bundled corpus and 3 checkpoints per size on both of
    `MICRO_TWO_CORPORA` (a superset of `MICRO_FINALS` and `MICRO_CHECKPOINTS`)."""
    from rbplab.study.loading import default_corpora

    finals = {**MICRO_FINALS, "corpora": default_corpora()}
    return finals, {**finals, "corpora": MICRO_TWO_CORPORA, "revisions": "log:3"}


def score(cache: Path, *tables: dict) -> Path:
    """Run each study table into `cache` (entries already there are kept, not scored again)."""
    from rbplab.grid import Grid
    from rbplab.runner import run_study

    for table in tables:
        assert run_study(Grid.read(table), cache_dir=cache, progress=False).ok
    return cache


def copy_cache(template: Path, dest: Path) -> Path:
    """A private copy of a session's cache template: reports and lookups may write to the cache
    they are given (plan records, indexes), and the template is shared by every test."""
    import shutil

    shutil.copytree(template, dest, symlinks=True, dirs_exist_ok=True)
    return dest
