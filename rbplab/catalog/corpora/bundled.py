"""Bundled corpora: data/corpora/<name>.jsonl.gz ({"id", "text"} per line) with its
<name>.meta.json (provenance, licence, description). An installed wheel without the bundled data
simply has none.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from rbplab.catalog.corpora.corpus import Corpus, build_corpus
from rbplab.catalog.corpora.files import jsonl_rows
from rbplab.core.documents import read_json
from rbplab.store.paths import data_dir


def corpora_dir() -> Path:
    return data_dir() / "corpora"


def bundled_names() -> list[str]:
    # Without the bundled data (an installed wheel) there are simply no bundled names.
    root = data_dir(required=False)
    folder = root / "corpora" if root is not None else None
    return (
        sorted(p.name[: -len(".jsonl.gz")] for p in folder.glob("*.jsonl.gz"))
        if folder and folder.is_dir()
        else []
    )


def _meta(name: str) -> dict:
    meta_file = corpora_dir() / f"{name}.meta.json"
    return read_json(meta_file, "corpus metadata", 1 << 20, shape=dict) if meta_file.is_file() else {}


def load_bundled(name: str, max_documents: int | None) -> Corpus:
    source = {"origin": "bundled", "file": f"corpora/{name}.jsonl.gz", **_meta(name)}
    return build_corpus(name, jsonl_rows(corpora_dir() / f"{name}.jsonl.gz"), source, max_documents)


def _count_lines(path: Path) -> int:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def bundled_listing() -> list[dict]:
    """One row per bundled corpus for `list_corpora`: name, origin, documents, licence, description."""
    rows = []
    for name in bundled_names():
        meta = _meta(name)
        rows.append(
            {
                "name": name,
                "origin": "bundled",
                "documents": meta.get("n_documents") or _count_lines(corpora_dir() / f"{name}.jsonl.gz"),
                "licence": meta.get("licence", meta.get("license")),
                "description": meta.get("description", ""),
            }
        )
    return rows
