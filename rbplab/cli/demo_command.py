"""`rbplab demo`: its arguments, checked before `rbplab.cli.demo` (which imports the model and
notebook stack) runs the whole pipeline on the bundled micro-suite and corpora, offline."""

from __future__ import annotations

import argparse

from rbplab.cli.extract_command import check_study_arguments, configure_study, settings_from_args


def configure_demo(p: argparse.ArgumentParser) -> None:
    configure_study(p, models=False)
    p.add_argument("--output-dir", "-o", default="reports", help="where the report goes (default: reports/)")
    p.add_argument("--no-notebooks", action="store_true", help="print the tables only")


def run_demo_command(args: argparse.Namespace) -> int:
    check_study_arguments(args)
    from rbplab.cli.demo import run_demo

    run_demo(
        args.family[0],
        args.corpus,
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        settings=settings_from_args(args),
        notebooks=not args.no_notebooks,
    )
    return 0
