"""Checking entries against what only the corpus and the model can tell, and repairing damaged ones
from what their spec records.

Recomputing a damaged or incomplete cache entry through the normal extraction path.

The entry's spec (`rbplab.core.settings.EntrySpec`) records which model, corpus and settings produced it.
Nothing else on disk is trusted: the model and corpus are re-resolved from the names the spec and
manifest record, planned again with the settings the spec pins, and used only if the planned key
equals the entry's key. Then the damaged
manifest is dropped and `extract` resumes, reusing every shard that still passes its checks. An
entry whose shard counts differ from what its spec and corpus give (a truncated entry) is damaged
too, though the store alone cannot tell.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.catalog.corpora import load_corpus
from rbplab.catalog.models import ModelSpec
from rbplab.core.documents import parse_json
from rbplab.core.errors import RbplabWarning
from rbplab.core.settings import EntrySpec, EntrySpecError
from rbplab.extraction.pipeline import extract_plan, load_scorer
from rbplab.extraction.plan import ExtractResult, Plan, at_layer, count_problems, plan_extraction
from rbplab.extraction.scoring import shard_frame
from rbplab.store.cache.entry import CacheEntry, entry_at
from rbplab.store.cache.layout import cache_key, max_manifest_bytes
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
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
        typed = EntrySpec.from_json(spec)
        settings, lens = typed.settings(), typed.lens  # pins every setting, the BOS policy included
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
            if lens is not None:  # a layer before the last: the same run, read through its lens
                plan = at_layer(plan, lens.layer)
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
                    RbplabWarning,
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


# What re-planning, tokenizing or loading a model raises when something is missing or broken.
USER_ERRORS = (OSError, ValueError, LookupError, ImportError, RuntimeError)


@dataclass
class Audit:
    """What `audit_entry` found: problems (the entry is damaged), notes (what was and was not
    checked), and `unchecked` when a check that was asked for could not run."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)


def sample_shards(n_shards: int, n: int) -> list[int]:
    """`n` shard indices out of `n_shards`, drawn from the operating system's randomness so that
    whoever prepared the cache cannot know which shards will be recomputed."""
    return sorted(random.SystemRandom().sample(range(n_shards), min(n, n_shards)))


def audit_entry(entry: CacheEntry, *, counts: bool = True, rederive: int | None = None) -> Audit:
    """Derived checks of a complete entry that passes every store check (`CacheEntry.problems`):
    with `counts`, its shard counts against its spec and corpus; with `rederive` (a number of
    shards, 0 for all of them), that many shards, chosen at random, recomputed with the model and
    compared. Reads only; marks nothing."""
    audit = Audit()
    if not counts and rederive is None:
        return audit
    purpose = "rederive" if rederive is not None else "derive the token and shard counts of"
    try:
        plan = replan(entry, purpose)
    except CacheError as err:
        if rederive is not None:
            audit.unchecked.append(str(err))
        else:
            audit.notes.append(f"token and shard counts not derived ({err})")
        return audit
    manifest = entry.manifest()
    try:
        audit.problems += count_problems(plan, manifest)
    except USER_ERRORS as err:  # the corpus cannot be tokenized here after all
        (audit.unchecked if rederive is not None else audit.notes).append(
            f"token and shard counts not derived ({' '.join(str(err).split())})"
        )
        return audit
    if audit.problems:
        return audit
    audit.notes.append(
        f"{len(manifest['shards'])} shards and {manifest['n_tokens']} tokens, as its spec and corpus give"
    )
    if rederive is not None:
        n_shards = len(manifest["shards"])
        indices = list(range(n_shards)) if rederive == 0 else sample_shards(n_shards, rederive)
        try:
            _rederive(entry, plan, manifest, indices, audit)
        except USER_ERRORS as err:  # the weights cannot be loaded, a forward pass fails, ...
            reason = " ".join(str(err).split())
            audit.unchecked.append(f"cannot rederive cache entry {entry.key[:12]}: {reason}")
    return audit


def _rederive(entry: CacheEntry, plan: Plan, manifest: dict, indices: list[int], audit: Audit) -> None:
    shards = plan.shards
    scorer = load_scorer(plan)
    produced_on = (manifest.get("provenance") or {}).get("device")
    here = plan.described.info.device
    same_values = []
    for index in indices:
        frame = shard_frame(plan, scorer, shards[index], plan.settings.batch_tokens, lambda _n: None)
        fresh = entry.encode_shard(index, frame)
        try:
            stored = entry.read_shard(index, mark_damaged=False)
        except CacheCorruptedError as err:
            audit.problems.append(str(err))
            continue
        if fresh == stored:
            continue
        difference = _difference(*(pq.read_table(pa.BufferReader(data)) for data in (fresh, stored)))
        if difference is None:
            same_values.append(index)  # equal values, other encoding (another pyarrow or pandas)
            continue
        where = "" if produced_on in (None, here) else f" (computed on {produced_on}, recomputed on {here})"
        audit.problems.append(f"shard {index} differs from its recomputation: {difference}{where}")
    if not audit.problems:
        label = "every shard" if len(indices) == len(manifest["shards"]) else f"shards {indices}"
        how = f"identical values (shards {same_values} encoded differently)" if same_values else "identical"
        audit.notes.append(f"{label} recomputed with the model: {how}")


def _difference(fresh: pa.Table, stored: pa.Table) -> str | None:
    """How the rows of a stored shard differ from a recomputed one, or None when every value is equal."""
    if fresh.num_rows != stored.num_rows:
        return f"{stored.num_rows} rows stored, {fresh.num_rows} recomputed"
    changed = []
    for name in fresh.column_names:
        a = fresh.column(name).to_numpy(zero_copy_only=False)
        b = stored.column(name).to_numpy(zero_copy_only=False) if name in stored.column_names else None
        if b is None:
            changed.append(f"{name} missing")
            continue
        same = _same_float(a, b) if a.dtype == np.float32 else a == b
        rows = int(np.count_nonzero(~same))
        if rows:
            detail = f", max |difference| {np.nanmax(np.abs(a - b)):.3g}" if name == "nll" else ""
            changed.append(f"{name} in {rows} of {len(a)} rows{detail}")
    return "; ".join(changed) or None


def _same_float(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
