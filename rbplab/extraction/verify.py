"""Checks of a cache entry that need its tokenizer, its corpus or its model.

The store checks everything an entry says about itself (keys, records, checksums, metadata, file
kinds and sizes), but two things it cannot know. How many tokens and shards the entry must hold
follows from the corpus, the tokenizer and the window settings: `audit_entry` re-plans the entry
(`rbplab.extraction.repair.replan`: config and tokenizer, the corpus re-resolved to the content
the key pins; no weights) and compares every shard's row count with the plan's
(`rbplab.extraction.plan.count_problems`). And whether the numbers are the model's: a shard
changed together with both of its checksum records passes every store check, so `audit_entry`
with `rederive` recomputes shards with the model through the normal extraction path
(`shard_frame`) and compares them with the stored ones byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import Plan, count_problems
from rbplab.extraction.repair import replan
from rbplab.extraction.scoring import shard_frame
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError, CacheError

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
