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
