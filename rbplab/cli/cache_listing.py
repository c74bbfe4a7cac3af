"""`rbplab cache ls`: the cache's entries as a table, filtered, or grouped over revisions.

A checkpointed model has one entry per revision, so the flat listing shows each revision with its
training step and the settings that tell entries apart (max_tokens, context length); `--group`
folds them into one row per model, corpus and settings. Filters take shell-style patterns
(``micro-*``), matched case-insensitively; a value that matches nothing gets a "did you mean" from
the names in the cache.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys

import pandas as pd

from rbplab.cli.units import human_bytes
from rbplab.core.names import did_you_mean

# Columns `--group` may fold by; bare `--group` folds revisions (one row per model, corpus, settings).
GROUP_COLUMNS = ("model", "corpus", "revision", "max_tokens", "context_length", "status")
DEFAULT_GROUP = ["model", "corpus", "max_tokens", "context_length"]
STATUSES = ("complete", "incomplete", "damaged")


def configure_ls(ls: argparse.ArgumentParser) -> None:
    ls.add_argument("--format", choices=["table", "csv", "json"], default="table")
    filters = ls.add_argument_group("filters (shell-style patterns such as micro-*, case-insensitive)")
    filters.add_argument("--model", "-m", nargs="+", metavar="PATTERN", help="model names")
    filters.add_argument("--family", "-f", nargs="+", metavar="FAMILY", help="members of registry families")
    filters.add_argument("--corpus", "-c", nargs="+", metavar="PATTERN", help="corpus names")
    filters.add_argument(
        "--revision",
        nargs="+",
        metavar="PATTERN",
        help="revisions (step-98, step*); 'final' for final weights",
    )
    filters.add_argument("--status", nargs="+", choices=STATUSES, help="entry states")
    filters.add_argument(
        "--max-tokens", nargs="+", metavar="N", help="scoring caps; 'all' for entries scored without one"
    )
    ls.add_argument(
        "--group",
        nargs="*",
        choices=GROUP_COLUMNS,
        metavar="COLUMN",
        help="one row per group: entries, revisions, steps, tokens and size summed; bare --group "
        f"groups by {' '.join(DEFAULT_GROUP)} (folding revisions); columns: {', '.join(GROUP_COLUMNS)}",
    )


def _matches(values: pd.Series, patterns: list[str]) -> pd.Series:
    folded = values.fillna("").astype(str).str.lower()
    return folded.map(lambda v: any(fnmatch.fnmatchcase(v, p.lower()) for p in patterns)).astype(bool)


def _warn_unmatched(what: str, patterns: list[str], values: pd.Series) -> None:
    known = sorted({str(v) for v in values.dropna()})
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(v.lower(), pattern.lower()) for v in known):
            print(
                f"rbplab: no entry has {what} {pattern!r}{did_you_mean(pattern, known)}",
                file=sys.stderr,
            )


def filter_entries(table: pd.DataFrame, args: argparse.Namespace) -> pd.DataFrame:
    """The rows of a `list_entries` table the command line's filters keep (all when none is given);
    each pattern that matches no entry at all is named on stderr with the closest names."""
    keep = pd.Series(True, index=table.index)
    revision = table["revision"].fillna("final")
    max_tokens = table["max_tokens"].astype("object").where(table["max_tokens"].notna(), "all").astype(str)
    for what, patterns, values in (
        ("model", args.model, table["model"]),
        ("corpus", args.corpus, table["corpus"]),
        ("revision", args.revision, revision),
        ("max_tokens", args.max_tokens, max_tokens),
    ):
        if patterns:
            _warn_unmatched(what, patterns, values)
            keep &= _matches(values, patterns)
    if args.family:
        from rbplab.catalog import registry

        members = pd.concat([registry.family_models(f) for f in args.family])["model"].str.lower()
        keep &= table["model"].fillna("").str.lower().isin(set(members))
    if args.status:
        keep &= table["status"].isin(args.status)
    return table[keep]


def _count(value: object) -> str:
    return "" if pd.isna(value) else f"{int(value):,}"


def group_entries(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per value of `by`: entries, complete (how many), revisions (distinct, 'final'
    counted as one), step_min/step_max, tokens and size_bytes summed."""
    frame = table.assign(revision_name=table["revision"].fillna("final"))
    grouped = frame.groupby(by, dropna=False, sort=True)
    out = grouped.agg(
        entries=("key", "size"),
        complete=("complete", "sum"),
        revisions=("revision_name", "nunique"),
        step_min=("step", "min"),
        step_max=("step", "max"),
        tokens=("n_tokens", "sum"),
        size_bytes=("size_bytes", "sum"),
    ).reset_index()
    for column in ("step_min", "step_max"):
        out[column] = out[column].astype("Int64")
    if "revision" in by:  # revisions in training order (step-98 before step-195), final last
        order = [c for c in by if c != "revision"] + ["step_min"]
        out = out.sort_values(order, kind="stable", na_position="last").reset_index(drop=True)
    return out


def _table_view(table: pd.DataFrame) -> pd.DataFrame:
    """The listing as a person reads it: short keys, 'final' and 'all' for missing revision and
    cap, thousands separators, sizes in KB/MB."""
    return pd.DataFrame(
        {
            "key": table["key"].str[:12],
            "model": table["model"],
            "revision": table["revision"].fillna("final"),
            "step": table["step"].map(_count),
            "corpus": table["corpus"],
            "max_tokens": table["max_tokens"].map(lambda v: "all" if pd.isna(v) else f"{int(v):,}"),
            "tokens": table["n_tokens"].map(_count),
            "status": table["status"],
            "size": table["size_bytes"].map(human_bytes),
            "created": table["created"].dt.strftime("%Y-%m-%d %H:%M"),
        }
    )


def _group_view(grouped: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    view = grouped[by].copy()
    if "max_tokens" in view:
        view["max_tokens"] = view["max_tokens"].map(lambda v: "all" if pd.isna(v) else f"{int(v):,}")
    if "revision" in view:
        view["revision"] = view["revision"].map(lambda v: "final" if pd.isna(v) else v)
    view["entries"] = grouped["entries"]
    view["complete"] = [f"{c}/{n}" for c, n in zip(grouped["complete"], grouped["entries"], strict=True)]
    if "revision" not in by:
        view["revisions"] = grouped["revisions"]
        view["steps"] = [
            "" if pd.isna(lo) else f"{int(lo):,}" if lo == hi else f"{int(lo):,}..{int(hi):,}"
            for lo, hi in zip(grouped["step_min"], grouped["step_max"], strict=True)
        ]
    view["tokens"] = grouped["tokens"].map(_count)
    view["size"] = grouped["size_bytes"].map(human_bytes)
    return view


def cache_listing(table: pd.DataFrame, args: argparse.Namespace) -> pd.DataFrame:
    """What `rbplab cache ls` prints for a `list_entries` table: filtered, grouped when asked, and
    formatted for reading when the format is a table (csv and json keep full keys and numbers)."""
    table = filter_entries(table, args)
    if args.group is not None:
        by = list(dict.fromkeys(args.group or DEFAULT_GROUP))
        grouped = group_entries(table, by)
        return _group_view(grouped, by) if args.format == "table" else grouped
    return _table_view(table) if args.format == "table" else table
