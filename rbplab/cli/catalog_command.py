"""`rbplab families`, `rbplab corpora`, `rbplab size`: what the catalog holds, read without running a
model (the registry CSV, the corpus list, a config's parameter count)."""

from __future__ import annotations

import argparse

from rbplab.cli.output import add_format_argument, print_table
from rbplab.core.display import size
from rbplab.core.errors import InvalidArgumentError


def configure_families(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a family: list its members (default: summary of all families)")
    p.add_argument("--all", action="store_true", help="every model of every family")
    add_format_argument(p)


def run_families(args: argparse.Namespace) -> int:
    from rbplab.catalog import registry

    if args.name:
        table = registry.family_models(args.name)
    else:
        table = registry.families()
    if not args.name and not args.all:
        table = (
            table.groupby("family", sort=True)
            .agg(
                models=("model", "size"),
                smallest=("model", "first"),
                largest=("model", "last"),
                S_min=("S", "min"),
                S_max=("S", "max"),
            )
            .reset_index()
        )
    elif args.format == "table":
        table = table[["family", "model", "source", "S", "n_params", "vocab_size", "max_context", "tied"]]
    if args.format == "table":  # sizes as a person reads them; csv and json keep the exact counts
        sizes = [c for c in ("S", "n_params", "S_min", "S_max") if c in table.columns]
        table = table.assign(**{c: table[c].map(size) for c in sizes})
    print_table(table, args.format)
    return 0


def run_corpora(args: argparse.Namespace) -> int:
    from rbplab.catalog.corpora import list_corpora

    table = list_corpora()
    if args.format == "table":
        table = table.assign(
            licence=table["licence"].fillna("").str.slice(0, 30),
            description=table["description"].fillna("").str.slice(0, 60),
        )
    print_table(table, args.format)
    return 0


def configure_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="registry short name, or a local model directory / config.json")


def run_size(args: argparse.Namespace) -> int:
    from rbplab.catalog import registry
    from rbplab.catalog.names import path_exists
    from rbplab.catalog.registry import parameter_counts

    row = registry.lookup_model(args.model)
    if row is None and not path_exists(args.model):
        registry.unregistered_location(args.model)  # raises the unknown-model error listing known models
        raise InvalidArgumentError(
            f"{args.model!r} is not registered and its config is not available offline; "
            "download its config.json and pass the file or directory"
        )
    if row is not None:
        print(f"{row['model']}: S = {row['S']:,} non-embedding parameters ({row['n_params']:,} in all)")
        return 0
    counts = parameter_counts(args.model)
    print(
        f"{args.model}: S = {counts.n_nonembedding:,} non-embedding parameters ({counts.n_params:,} in all; "
        f"embedding: {', '.join(counts.embedding_modules)}; tied head: {counts.tied})"
    )
    return 0
