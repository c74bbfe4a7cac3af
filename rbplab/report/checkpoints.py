"""The training checkpoints the cache already holds, which the report hands the training-dynamics
notebook when nothing names its checkpoints (what `rbplab demo` scored), and which the notebook
finds the same way when opened with its defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd


def cached_checkpoints(
    families: Iterable[str],
    corpora: Sequence[str],
    cache_dir: str | Path | None = None,
) -> dict | None:
    """A study table naming the training checkpoints of `families` that the cache holds on every
    one of `corpora` (what `rbplab demo` scores, or `rbplab run` with revisions): the revisions
    every model has at one scoring cap, the cap that covers the most checkpoints. None when the
    cache holds no checkpoint of every model on every corpus."""
    from rbplab.catalog import registry, schedules
    from rbplab.store.cache.admin import list_entries

    families = list(families)
    members = pd.concat([registry.family_models(f) for f in families], ignore_index=True)["model"]
    entries = list_entries(cache_dir)
    entries = entries[
        entries["complete"] & entries["model"].isin(list(members)) & entries["corpus"].isin(list(corpora))
    ].copy()
    # A final checkpoint is cached under the model itself (no revision): name it as its schedule does.
    finals = {}
    for model in members:
        schedule = schedules.schedule_of(model)
        if schedule is not None:
            finals[model] = (schedule.final_step, schedule.revision(schedule.final_step))
    for i, row in entries[entries["revision"].isna() & entries["step"].notna()].iterrows():
        final = finals.get(row["model"])
        if final is not None and int(row["step"]) == final[0]:
            entries.loc[i, "revision"] = final[1]
    entries = entries[entries["revision"].notna()]
    if entries.empty:
        return None
    best: tuple[int, dict] | None = None
    cap = entries["max_tokens"].astype("object").where(entries["max_tokens"].notna(), None)
    for value, group in entries.assign(cap=cap).groupby("cap", dropna=False):
        present = group.groupby("revision").apply(
            lambda g: set(zip(g["model"], g["corpus"], strict=True)), include_groups=False
        )
        needed = {(m, c) for m in members for c in corpora}
        revisions = sorted((r for r, pairs in present.items() if needed <= pairs), key=_step_order)
        if len(revisions) < 2:
            continue
        table = {
            "families": families,
            "corpora": list(corpora),
            "revisions": revisions,
            "settings": {} if pd.isna(value) else {"max_tokens": int(value)},
        }
        if best is None or len(revisions) > best[0]:
            best = (len(revisions), table)
    return None if best is None else best[1]


def _step_order(revision: str) -> tuple:
    digits = "".join(ch if ch.isdigit() else " " for ch in revision).split()
    return (int(digits[-1]) if digits else -1, revision)
