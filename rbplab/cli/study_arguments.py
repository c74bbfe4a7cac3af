"""What `rbplab fit`, `report` and `demo` share: the grid options (--family, --corpus, --cache-dir
and the extraction settings), --extract, the check of family and corpus names before anything slow,
and the remedy a missing run is reported with."""

from __future__ import annotations

import argparse

from rbplab.cli.extract_command import add_settings_arguments


def configure_study(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", "-f", nargs="+", default=["micro"], help="registry families (default: micro)")
    p.add_argument("--corpus", "-c", nargs="+", default=None, help="corpora (default: every bundled corpus)")
    p.add_argument(
        "--cache-dir", default=None, help="cache location (default $RBPLAB_CACHE or ~/.cache/rbplab)"
    )
    add_settings_arguments(p)


def add_extract_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--extract",
        action="store_true",
        help="run the models for runs missing from the cache (default: a missing run is an error naming it)",
    )


def check_study_arguments(args: argparse.Namespace, families: bool = True) -> None:
    """Unknown families and corpora fail here, from the registry CSV and the corpus names alone,
    before anything imports torch or transformers (seconds) or opens a corpus. Bundled and hub
    corpus names are taken in any case, as family names are ("Prose" is prose)."""
    corpora = check_names(args.family if families else [], args.corpus)
    if args.corpus:
        args.corpus = corpora


def check_names(families: list[str], corpora: list[str] | None) -> list[str] | None:
    """Each family known to the registry and each corpus a known name or an existing path, else a
    one-line error; the corpora in their canonical spelling."""
    from rbplab.catalog.corpora.loading import canonical_corpus, check_corpus
    from rbplab.catalog.registry import family_models

    for family in families:
        family_models(family)
    if not corpora:
        return corpora
    corpora = [canonical_corpus(c) for c in corpora]
    for corpus in corpora:
        check_corpus(corpus)
    return corpora


def missing_remedy(args: argparse.Namespace) -> str:
    """How the CLI says to compute missing runs: the user's own command with --extract."""
    import shlex

    argv = [a for a in getattr(args, "argv", []) if a != "--extract"]
    return f"--extract: {shlex.join(['rbplab', *argv, '--extract'])}"
