"""Recomputing a damaged or incomplete cache entry through the normal extraction path.

The entry's spec (`rbplab.core.entry_spec.EntrySpec`) records which model, corpus and settings produced it.
Nothing else on disk is trusted: the model and corpus are re-resolved from the names the spec and
manifest record, planned again with the settings the spec pins, and used only if the planned key
equals the entry's key. Then the damaged
manifest is dropped and `extract` resumes, reusing every shard that still passes its checks. An
entry whose shard counts differ from what its spec and corpus give (a truncated entry) is damaged
too, though the store alone cannot tell.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora.loading import load_corpus
from rbplab.catalog.models import ModelSpec
from rbplab.core.documents import parse_json
from rbplab.core.entry_spec import EntrySpec, EntrySpecError
from rbplab.extraction.hits import ExtractResult
from rbplab.extraction.pipeline import extract_plan
from rbplab.extraction.plan import Plan, count_problems, plan_extraction
from rbplab.store.cache.entry import CacheEntry, entry_at
from rbplab.store.cache.layout import cache_key, max_manifest_bytes
from rbplab.store.cache.reading import CacheError
from rbplab.store.files import cache_root, entry_dir_problem


def _get(data: Any, *path: str) -> Any:
    for part in path:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if isinstance(v, str) and v))


def replan(entry: CacheEntry, purpose: str = "repair") -> Plan:
    """The extraction plan whose key is `entry.key`, or CacheError saying what could not be found
    (as "cannot <purpose> cache entry ...")."""
    spec = entry.spec
    try:
        settings = EntrySpec.from_json(spec).settings()  # pins every setting, the BOS policy included
    except EntrySpecError as err:
        raise CacheError(
            f"cannot {purpose} cache entry {entry.key[:12]}: its spec.json is not one this rbplab writes "
            f"({err}); re-extract it: rbplab cache rm {entry.key[:12]}, then rbplab extract the same model "
            "and corpus"
        ) from None
    bos = settings.pop("bos")
    hints: dict = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = parse_json(entry.read_file("manifest.json", max_manifest_bytes(spec)), "manifest.json")
        hints = loaded if isinstance(loaded, dict) else {}
    model_names = _unique(
        [_get(hints, "model", "source"), _get(hints, "model", "name"), _get(spec, "model", "name")]
    )
    corpus_name = _get(spec, "corpus", "name")
    corpus_names = _unique(
        [_get(hints, "corpus", "source", "path"), corpus_name, f"hub:{corpus_name}" if corpus_name else None]
    )
    n_documents = _get(spec, "corpus", "n_documents")
    corpus, corpus_errors = None, []
    for name in corpus_names:
        try:
            candidate = load_corpus(name, max_documents=n_documents if isinstance(n_documents, int) else None)
        except (OSError, ValueError, LookupError, ImportError, RuntimeError) as err:
            corpus_errors.append(f"{name}: {err}")
            continue
        if candidate.content_hash() == _get(spec, "corpus", "content_hash"):
            corpus = candidate
            break
        corpus_errors.append(f"{name}: different content")
    if corpus is None:
        raise CacheError(
            f"cannot {purpose} cache entry {entry.key[:12]}: corpus {corpus_name!r} cannot be re-resolved "
            f"to the content it was extracted from ({'; '.join(corpus_errors) or 'no name recorded'})"
        )
    model_errors = []
    for name in model_names:
        model = ModelSpec(
            name,
            revision=_get(spec, "model", "revision"),
            gguf_file=_get(spec, "model", "gguf_file"),
            trust_remote_code=bool(_get(spec, "model", "trust_remote_code")),
        )
        try:
            plan = plan_extraction(model, corpus, bos=bos, **settings)
            if cache_key(plan.key_spec) == entry.key:
                return plan
            model_errors.append(f"{name}: loads, but with different weights or settings")
        except (OSError, ValueError, LookupError, ImportError, RuntimeError) as err:
            model_errors.append(f"{name}: {' '.join(str(err).split())}")
    raise CacheError(
        f"cannot {purpose} cache entry {entry.key[:12]}: model {_get(spec, 'model', 'name')!r} cannot be "
        f"re-resolved to the one it was extracted with ({'; '.join(model_errors) or 'no name recorded'})"
    )


def repair_entry(key: str | Path, root: str | Path | None = None, *, progress: bool = False) -> ExtractResult:
    """Recompute whatever is damaged or missing in one entry (a key prefix or an entry directory); a
    sound entry whose summary is not the one its shards give gets its summary derived again
    (`repair_summary`, with a warning)."""
    root = cache_root(root)
    path = Path(key) if isinstance(key, Path) else None
    if path is None:
        entry = CacheEntry.open(key, root)
    else:
        folder = entry_dir_problem(path)
        if folder is not None:
            raise CacheError(
                f"cannot repair cache entry {path.name[:12]}: {folder}; nothing is written through it "
                f"(rbplab cache rm {path.name[:12]} removes a linked entry folder, not its target)"
            )
        entry = entry_at(path, root)
        if entry is None:
            raise CacheError(
                f"cannot repair cache entry {path.name[:12]}: no spec.json hashes to its key, so what it "
                f"holds is unknown; remove it (rbplab cache rm {path.name[:12]})"
            )
    plan = replan(entry)
    with entry.lock():
        if entry.is_complete() and (entry.problems() or count_problems(plan, entry.manifest())):
            entry.manifest_path.unlink()  # the entry is damaged: recompute, reusing sound shards
        elif entry.is_complete():
            mismatch = repair_summary(entry)
            if mismatch is not None:
                warnings.warn(
                    f"cache entry {entry.key[:12]}: {mismatch}; its summary was derived again from its "
                    "shards",
                    stacklevel=2,
                )
    return extract_plan(plan, cache_dir=root, progress=progress)  # the very plan whose key matched


def repair_summary(entry: CacheEntry) -> str | None:
    """Derive again the summary of a complete entry whose shards are sound but whose summary, though
    it keeps its own rules, is not the one they give (`summary_problems(derive=True)`); no model is
    needed. Returns that problem, None when the summary was theirs (nothing written)."""
    with entry.lock():
        mismatch = entry.summary_problems(derive=True)
        if mismatch:
            entry.derive_summary()
    return mismatch[0] if mismatch else None
