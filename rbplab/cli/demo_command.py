"""`rbplab demo`: its arguments, checked before `rbplab.cli.demo` (which imports the model and
notebook stack) runs the whole pipeline on the bundled micro-suite and corpora, offline."""

from __future__ import annotations

import argparse

from rbplab.cli.arguments import add_grid_arguments, grid_from_args
from rbplab.core.errors import InvalidArgumentError


def configure_demo(p: argparse.ArgumentParser) -> None:
    add_grid_arguments(p, defaults=True, one_family=True)
    p.add_argument("--output-dir", "-o", default="reports", help="where the report goes (default: reports/)")
    p.add_argument("--no-notebooks", action="store_true", help="print the tables only")


def run_demo_command(args: argparse.Namespace) -> int:
    grid = grid_from_args(args)
    if len(grid.families) != 1:
        raise InvalidArgumentError(
            f"--family: the demo runs one family with its checkpoints, not {len(grid.families)} "
            f"({', '.join(grid.families)}); give one --family"
        )
    from rbplab.cli.demo import run_demo

    run_demo(
        grid.families[0],
        list(grid.corpora) if args.corpus else None,
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        settings=grid.settings,
        notebooks=not args.no_notebooks,
    )
    return 0
