"""What a report analyses, resolved: every model of the families (with S), the corpora (the
bundled ones when none are named), the extraction settings in full, or a study file's grid; and
the training checkpoints the cache already holds for the training-dynamics notebook.

The index page and the results file state this grid, so "corpora: null" (the notebooks' own
default) never stands in for the corpora that were analysed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.core.settings import ExtractionSettings


def resolve_grid(
    families: Sequence[str],
    corpora: Sequence[str] | None,
    models: Sequence[str] | None = None,
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    study_file: str | Path | None = None,
) -> dict:
    """The grid as plain data (`rbplab.grid.Grid.to_dict`): families, models (family, model, S
    and, from a study file, the revisions), corpora, settings (every field) and settings_changed
    (those not at their default). A study file's own grid replaces families, corpora and settings."""
    from rbplab.grid import Grid

    if study_file is not None:
        return Grid.read(study_file).to_dict() | {"study_file": str(study_file)}
    return Grid.build(list(families), corpora, settings, models=models).to_dict()


def cached_checkpoints(
    families: Iterable[str],
    corpora: Sequence[str],
    cache_dir: str | Path | None = None,
) -> dict | None:
    """A study table naming the training checkpoints of `families` that the cache holds on every
    one of `corpora` (what `rbplab demo` scores, or `rbplab run` with revisions): the revisions
    every model has at one scoring cap, the cap that covers the most checkpoints. None when the
    cache holds no checkpoint of every model on every corpus."""
    from rbplab.store import registry, schedules
    from rbplab.store.cache import list_entries

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
