"""`rbplab cache`: list, remove, verify, repair, export and import cache entries.

`cache ls` shows the entries as a table, filtered, or grouped over revisions: a checkpointed model
has one entry per revision, so the flat listing shows each revision with its training step and the
settings that tell entries apart (max_tokens, context length); `--group` folds them into one row
per model, corpus and settings. Filters take shell-style patterns (``micro-*``), matched
case-insensitively; a value that matches nothing gets a "did you mean" from the names in the cache.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from typing import TYPE_CHECKING

from rbplab.cli.arguments import add_cache_dir_argument, positive_int
from rbplab.cli.output import USER_ERRORS, add_format_argument, human_bytes, one_line, print_table
from rbplab.core.errors import InvalidArgumentError, did_you_mean

if TYPE_CHECKING:  # pandas loads with the commands that list: `rbplab --help` does without it
    import pandas as pd

CACHE_HELP = "list, remove, verify, repair, export or import cache entries"
CACHE_EXAMPLES = """examples:
  rbplab cache ls
  rbplab cache rm 3fa2c1d0 --incomplete
  RBPLAB_CACHE=/data/rbplab rbplab cache verify
  rbplab cache verify 3fa2c1d0 --sample 2      # also recompute 2 random shards with the model
  rbplab cache repair
  rbplab cache export 3fa2c1d0 9b0e44aa -o runs.tar && rbplab cache import runs.tar
  rbplab cache ls --model 'micro-*' --revision 'step*' --group"""

# Columns `--group` may fold by; bare `--group` folds revisions (one row per model, corpus, settings).
GROUP_COLUMNS = ("model", "corpus", "revision", "max_tokens", "context_length", "status")
DEFAULT_GROUP = ["model", "corpus", "max_tokens", "context_length"]
STATUSES = ("complete", "incomplete", "damaged")


def configure_cache(p: argparse.ArgumentParser) -> None:
    """The arguments of `rbplab cache` and its subcommands."""
    add_cache_dir_argument(p)
    sub = p.add_subparsers(dest="cache_command", metavar="{ls,rm,verify,repair,export,import,path}")
    sub.required = True
    ls = sub.add_parser(
        "ls", help="list cache entries (revision, step, settings, tokens, size), filtered or --group'ed"
    )
    _configure_ls(ls)
    rm = sub.add_parser("rm", help="remove entries by key prefix")
    rm.add_argument(
        "keys",
        nargs="*",
        metavar="KEY_PREFIX",
        help="key prefixes (at least 8 hex characters), as shown by ls",
    )
    rm.add_argument("--incomplete", action="store_true", help="remove every incomplete entry")
    rm.add_argument("--all-matching", action="store_true", help="remove every entry a prefix matches")
    rm.add_argument("--all", action="store_true", help="remove every entry")
    verify = sub.add_parser(
        "verify",
        help="check every entry (each shard read, each summary derived again from its shards and "
        "compared); reports problems, deletes nothing (but --fix-litter's litter)",
    )
    verify.add_argument("keys", nargs="*", metavar="KEY_PREFIX", help="entries to check (default: all)")
    verify.add_argument(
        "--no-derive",
        action="store_true",
        help="skip deriving each entry's token and shard counts from its tokenizer and corpus "
        "(faster; a truncated entry then goes unnoticed)",
    )
    verify.add_argument(
        "--rederive",
        action="store_true",
        help="recompute every shard with the model and compare it byte for byte (slow; catches a shard "
        "changed together with its checksum records)",
    )
    verify.add_argument(
        "--sample",
        type=positive_int,
        metavar="N",
        help="like --rederive, for N shards per entry chosen at random",
    )
    verify.add_argument(
        "--fix-litter",
        action="store_true",
        help="remove what killed processes left: temporary folders of imports, temporary files of writes",
    )
    repair = sub.add_parser("repair", help="recompute damaged or incomplete entries through extraction")
    repair.add_argument(
        "keys", nargs="*", metavar="KEY_PREFIX", help="entries to repair (default: all that need it)"
    )
    repair.add_argument("--no-progress", action="store_true", help="no progress bar")
    export = sub.add_parser("export", help="write complete entries into one archive file")
    export.add_argument("keys", nargs="+", metavar="KEY_PREFIX", help="entries to export")
    export.add_argument("-o", "--output", required=True, help="archive file to write (tar)")
    imp = sub.add_parser("import", help="verify and add the entries of an archive")
    imp.add_argument("archive", help="a file written by rbplab cache export")
    sub.add_parser("path", help="print the cache location")
    for child in (ls, rm, verify, repair, export, imp):
        add_cache_dir_argument(child, shown=False)


def _selected_dirs(root, prefixes: list[str]) -> tuple[list, list[str]]:
    """Entry directories named by key prefixes (all entries when none), and the unmatched prefixes."""
    from rbplab.store.cache.layout import entry_dirs

    every = entry_dirs(root)
    if not prefixes:
        return every, []
    chosen, unknown = {}, []
    for prefix in prefixes:
        matches = [p for p in every if prefix and p.name.startswith(prefix.lower())]
        chosen.update((p.name, p) for p in matches)
        if not matches:
            unknown.append(prefix)
    return sorted(chosen.values()), unknown


def _verify(root, args: argparse.Namespace) -> int:
    """One line per entry (ok, partial, CORRUPT per problem, UNCHECKED when a requested recomputation
    cannot run), then the litter of killed processes; status 1 when anything is wrong."""
    from rbplab.store.cache.admin import entry_dir_problems
    from rbplab.store.cache.entry import entry_at

    rederive = args.sample if args.sample is not None else (0 if args.rederive else None)
    dirs, unknown = _selected_dirs(root, args.keys)
    bad = len(unknown)
    for prefix in unknown:
        print(f"MISSING  {prefix}  no cache entry matches this key prefix")
    for path in dirs:
        # the summary last: a truncated entry is named by its derived counts before its summary
        problems = entry_dir_problems(path, root, summary=False)
        entry = None if problems else entry_at(path, root)
        notes, unchecked = [], []
        if entry is not None and entry.is_complete() and (not args.no_derive or rederive is not None):
            from rbplab.extraction.verify import audit_entry

            audit = audit_entry(entry, counts=not args.no_derive, rederive=rederive)
            problems, notes, unchecked = audit.problems, audit.notes, audit.unchecked
        if entry is not None and entry.is_complete():
            problems = problems + entry.summary_problems(derive=True)
        for problem in problems:
            print(f"CORRUPT  {path.name[:12]}  {problem}")
        for reason in unchecked:
            print(f"UNCHECKED {path.name[:12]}  {reason}")
        bad += len(problems) + len(unchecked)
        if problems or unchecked:
            continue
        if entry.is_complete():
            print(f"ok       {path.name[:12]}" + "".join(f"  {note}" for note in notes))
        else:
            n = len(list(path.glob("shard-*.parquet.sha256")))
            print(f"partial  {path.name[:12]}  incomplete, {n} shard(s) so far; rbplab extract resumes it")
    from rbplab.store.cache.admin import index_problems

    # The index is derived from the summaries: a row that differs from its summary's, or is stale.
    for problem in index_problems(root, None if not args.keys else dirs):
        print(f"CORRUPT  index  {problem}")
        bad += 1
    _report_leftovers(root, dirs, args.fix_litter)
    if bad:
        print(
            f"rbplab: {bad} problem(s) found; rbplab cache repair recomputes damaged entries", file=sys.stderr
        )
    return 1 if bad else 0


def _report_leftovers(root, dirs: list, fix: bool) -> None:
    """Report (and with `fix` remove) what killed processes left: temporary folders of imports and
    temporary files of writes; entries being written keep theirs."""
    from rbplab.store.archive import remove_stale_imports, stale_imports
    from rbplab.store.cache.entry import entry_at
    from rbplab.store.cache.reading import CacheError

    for folder in remove_stale_imports(root) if fix else stale_imports(root):
        what = "removed  " if fix else "LITTER   "
        print(what + folder.name + ("" if fix else "  a killed import's temporary folder; --fix-litter"))
    for path in dirs:
        entry = entry_at(path, root)
        temporaries = entry.temporaries() if entry is not None else []
        if not temporaries:
            continue
        if not fix:
            names = ", ".join(t.name for t in temporaries)
            print(f"LITTER   {path.name[:12]}  temporary files of a killed write ({names}); --fix-litter")
            continue
        try:
            with entry.lock(timeout=0):  # the lock holder removes dead writers' temporaries
                pass
        except CacheError as err:
            print(f"kept     {path.name[:12]}  {one_line(err)}")
            continue
        print(f"removed  {path.name[:12]}  {len(temporaries)} temporary file(s)")


def _repair(root, prefixes: list[str], progress: bool) -> int:
    from rbplab.extraction.verify import repair_entry
    from rbplab.store.cache.entry import entry_at

    dirs, unknown = _selected_dirs(root, prefixes)
    failed = len(unknown)
    for prefix in unknown:
        print(f"rbplab: error: no cache entry matches key prefix {prefix!r}", file=sys.stderr)
    for path in dirs:
        entry = entry_at(path, root)
        summary_fixed = None
        if entry is not None and entry.is_complete() and not entry.problems():
            from rbplab.extraction.verify import audit_entry, repair_summary

            try:  # sound shards: a summary that is not theirs needs no model to be derived again
                summary_fixed = repair_summary(entry)
            except USER_ERRORS as err:
                failed += 1
                print(f"rbplab: error: {one_line(err)}", file=sys.stderr)
                continue
            if summary_fixed is not None:
                print(f"repaired {path.name[:12]}  {summary_fixed}; derived again from its shards")
            if not prefixes and not audit_entry(entry).problems:  # sound, or its counts cannot be derived
                continue
        try:
            result = repair_entry(path, root, progress=progress)
        except USER_ERRORS as err:
            failed += 1
            print(f"rbplab: error: {one_line(err)}", file=sys.stderr)
            continue
        if result.from_cache:
            if summary_fixed is None:
                print(f"ok       {path.name[:12]}  nothing to repair")
            continue
        computed = result.manifest.get("provenance", {}).get("tokens_computed")
        print(f"repaired {path.name[:12]}  {result.n_tokens} tokens ({computed} recomputed)")
    from rbplab.store.cache.admin import rebuild_index

    rows = rebuild_index(root, None if not prefixes else dirs)
    print(f"index    {rows} row(s) derived again from the entries' verified summaries")
    return 1 if failed else 0


def run_cache(args: argparse.Namespace) -> int:
    """Run `rbplab cache <subcommand>`; the exit status."""
    from rbplab.store.archive import export_entries, import_archive
    from rbplab.store.cache.admin import list_entries, remove_entries
    from rbplab.store.files import cache_root

    root = cache_root(args.cache_dir)
    if args.cache_command == "path":
        print(root)
        return 0
    if args.cache_command == "ls":
        table = cache_listing(list_entries(root), args)
        if args.format == "table":
            print(f"cache: {root}")
        print_table(table, args.format)
        return 0
    if args.cache_command == "rm":
        if not (args.keys or args.incomplete or args.all):
            raise InvalidArgumentError("say what to remove: KEY_PREFIX..., --incomplete or --all")
        removed = remove_entries(
            args.keys,
            root=root,
            incomplete=args.incomplete,
            all_matching=args.all_matching,
            everything=args.all,
        )
        if args.all and not removed:
            print("cache is empty")
        for key in removed:
            print(f"removed {key}")
        return 0
    if args.cache_command == "export":
        keys = export_entries(args.keys, args.output, root=root)
        print(f"exported {len(keys)} entries to {args.output}: {' '.join(k[:12] for k in keys)}")
        return 0
    if args.cache_command == "import":
        for key, state in import_archive(args.archive, root=root):
            print(f"{state} {key}")
        return 0
    if args.cache_command == "repair":
        return _repair(root, args.keys, not args.no_progress)
    return _verify(root, args)


def _configure_ls(ls: argparse.ArgumentParser) -> None:
    add_format_argument(ls)
    filters = ls.add_argument_group(
        "filters (shell-style patterns such as micro-*, case-insensitive; repeatable, as the grid options)"
    )
    many = {"nargs": "+", "action": "extend"}  # -c a -c b is -c a b, as in every command
    filters.add_argument("--model", "-m", **many, metavar="PATTERN", help="model names")
    filters.add_argument("--family", "-f", **many, metavar="FAMILY", help="members of registry families")
    filters.add_argument("--corpus", "-c", **many, metavar="PATTERN", help="corpus names")
    filters.add_argument(
        "--revision",
        **many,
        metavar="PATTERN",
        help="revisions (step-98, step*); 'final' for final weights",
    )
    filters.add_argument("--status", **many, choices=STATUSES, help="entry states")
    filters.add_argument(
        "--max-tokens", **many, metavar="N", help="scoring caps; 'all' for entries scored without one"
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
    import pandas as pd

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
    import pandas as pd

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
    import pandas as pd

    return pd.DataFrame(
        {
            "key": table["key"].str[:12],
            "model": table["model"],
            "revision": table["revision"].fillna("final"),
            "step": table["step"].map(_count),
            "corpus": table["corpus"],
            "max_tokens": table["max_tokens"].map(lambda v: "all" if pd.isna(v) else f"{int(v):,}"),
            "tokens": table["n_tokens"].map(_count),
            # rows with a near-tie inside the error band, settled by exact sign
            "settled": table["settled_rows"].map(_count),
            "status": table["status"],
            "size": table["size_bytes"].map(human_bytes),
            "created": table["created"].dt.strftime("%Y-%m-%d %H:%M"),
        }
    )


def _group_view(grouped: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    import pandas as pd

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
