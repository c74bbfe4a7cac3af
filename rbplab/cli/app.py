"""The `rbplab` command line.

Subcommands live in COMMANDS (name -> Command); `register()` adds one, so later
modules (analysis, report, demo) plug in without touching the parser code. A user
error (unknown model, empty corpus, unwritable cache, ...) prints one line and exits
with status 1; `--traceback` (or RBPLAB_DEBUG=1) shows the full trace instead.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from rbplab.cli.cache_command import CACHE_EXAMPLES, CACHE_HELP, configure_cache, run_cache
from rbplab.cli.extract_command import (
    add_settings_arguments,
    configure_extract,
    positive_int,
    run_extract,
    settings_from_args,
)
from rbplab.cli.output import USER_ERRORS, one_line, print_table
from rbplab.cli.plan_command import add_cost_arguments, configure_plan, run_plan, run_study_plan
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.names import did_you_mean


@dataclass(frozen=True)
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]  # adds the subcommand's arguments
    run: Callable[[argparse.Namespace], int | None]  # returns the exit status (None = 0)


COMMANDS: dict[str, Command] = {}


def register(
    name: str,
    help: str,
    configure: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int | None],
) -> None:
    """Add (or replace) a subcommand."""
    COMMANDS[name] = Command(help, configure, run)


# ---------------------------------------------------------------------------------------------
# extract (rbplab.cli.extract_command), registered first so `rbplab --help` lists it first

register(
    "extract",
    "compute per-token rank statistics (model x corpus) into the cache",
    configure_extract,
    run_extract,
)

# ---------------------------------------------------------------------------------------------
# families, corpora, size


def _configure_families(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a family: list its members (default: summary of all families)")
    p.add_argument("--all", action="store_true", help="every model of every family")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")


def _run_families(args: argparse.Namespace) -> int:
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
    print_table(table, args.format)
    return 0


def _run_corpora(args: argparse.Namespace) -> int:
    from rbplab.catalog.corpora import list_corpora

    table = list_corpora()
    if args.format == "table":
        table = table.assign(
            licence=table["licence"].fillna("").str.slice(0, 30),
            description=table["description"].fillna("").str.slice(0, 60),
        )
    print_table(table, args.format)
    return 0


def _configure_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="registry short name, or a local model directory / config.json")


def _run_size(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rbplab.catalog import registry
    from rbplab.catalog.sizes import parameter_counts

    row = registry.lookup_model(args.model)
    if row is None and not Path(args.model).exists():
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


def _configure_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")


register("cache", CACHE_HELP, configure_cache, run_cache)
register("families", "model families of the registry and their sizes S", _configure_families, _run_families)
register("corpora", "bundled and hub corpora", _configure_format, _run_corpora)
register("size", "non-embedding parameter count S of a model", _configure_size, _run_size)


# ---------------------------------------------------------------------------------------------
# analysis, report, demo: imported lazily so `rbplab cache ls` does not pay for the notebook stack


def _configure_study(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", "-f", nargs="+", default=["micro"], help="registry families (default: micro)")
    p.add_argument("--corpus", "-c", nargs="+", default=None, help="corpora (default: every bundled corpus)")
    p.add_argument(
        "--cache-dir", default=None, help="cache location (default $RBPLAB_CACHE or ~/.cache/rbplab)"
    )
    add_settings_arguments(p)


def _add_extract_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--extract",
        action="store_true",
        help="run the models for runs missing from the cache (default: a missing run is an error naming it)",
    )


def _check_study_arguments(args: argparse.Namespace, families: bool = True) -> None:
    """Unknown families and corpora fail here, from the registry CSV and the corpus names alone,
    before anything imports torch or transformers (seconds) or opens a corpus. Bundled and hub
    corpus names are taken in any case, as family names are ("Prose" is prose)."""
    corpora = check_names(args.family if families else [], args.corpus)
    if args.corpus:
        args.corpus = corpora


def check_names(families: list[str], corpora: list[str] | None) -> list[str] | None:
    """Each family known to the registry and each corpus a known name or an existing path, else a
    one-line error; the corpora in their canonical spelling."""
    from rbplab.catalog.corpora import canonical_corpus, check_corpus_spec
    from rbplab.catalog.registry import family_models

    for family in families:
        family_models(family)
    if not corpora:
        return corpora
    corpora = [canonical_corpus(c) for c in corpora]
    for corpus in corpora:
        check_corpus_spec(corpus)
    return corpora


def missing_remedy(args: argparse.Namespace) -> str:
    """How the CLI says to compute missing runs: the user's own command with --extract."""
    import shlex

    argv = [a for a in getattr(args, "argv", []) if a != "--extract"]
    return f"--extract: {shlex.join(['rbplab', *argv, '--extract'])}"


def _configure_fit(p: argparse.ArgumentParser) -> None:
    _configure_study(p)
    p.add_argument(
        "--k", nargs="+", type=positive_int, default=[1, 10, 100], help="thresholds k (default 1 10 100)"
    )
    _add_extract_flag(p)
    _configure_format(p)


def _run_fit(args: argparse.Namespace) -> int:
    _check_study_arguments(args)
    from rbplab.grid import Grid
    from rbplab.study import MissingRunsError, load_study, size

    grid = Grid.build(args.family, args.corpus, settings_from_args(args))
    try:
        study = load_study(grid, cache_dir=args.cache_dir, extract=args.extract)
    except MissingRunsError as err:
        raise err.with_remedy(missing_remedy(args)) from None
    print_table(size.fit_table(study, args.k), args.format)
    return 0


def _configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", nargs="?", help="a study TOML (rbplab run): analyse exactly its grid")
    _configure_study(p)
    p.add_argument("--output-dir", "-o", default="reports", help="where executed notebooks and HTML go")
    p.add_argument(
        "--notebook",
        nargs="+",
        default=None,
        help="notebooks to run, by stem or number (01_rbp_vs_size or 01; default: all)",
    )
    p.add_argument(
        "--figures",
        metavar="FORMATS",
        default="",
        help="also export every figure as these formats, comma-separated (png,svg,pdf; needs the "
        "'export' extra and Chromium), under OUTPUT_DIR/figures/",
    )
    p.add_argument(
        "--figure-size",
        choices=("full", "column", "screen"),
        default="full",
        help="--figures as paper figures 7 in wide (full, default) or 3.5 in (column), 8-9 pt text and "
        "no in-figure title; or as shown on screen (screen)",
    )
    p.add_argument(
        "--params",
        metavar="FILE.yaml",
        help="notebook parameters from a YAML file (name: value), as papermill -f takes them",
    )
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="one notebook parameter, its value read as YAML (e.g. -p ks '[1, 5, 50]'); repeatable",
    )
    _add_extract_flag(p)


def _report_parameters(args: argparse.Namespace) -> dict:
    """--params FILE.yaml, then each -p NAME VALUE over it."""
    import yaml

    from rbplab.viz.parameters import ParameterError, read_params_file

    values = read_params_file(args.params) if args.params else {}
    for name, text in args.param:
        try:
            values[name] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ParameterError(f"-p {name}: cannot read {text!r} as a YAML value") from None
    return values


def _report_request(args: argparse.Namespace, parameters: dict):
    """The report's grid, cache folder and extract flag: the study file, else --family/--corpus and
    the settings options, each replaced by a parameter of the same name from --params/-p (as
    papermill takes them), which leave `parameters` here: the grid is the report's one request."""
    from rbplab.core.settings import ExtractionSettings
    from rbplab.grid import Grid
    from rbplab.report.request import resolved
    from rbplab.viz.parameters import as_mapping, as_names

    study = parameters.pop("study_file", None) or args.study
    # Names given through -p get the checks --family/--corpus got (_check_study_arguments).
    given_families = as_names(parameters.pop("families", None), "families")
    given_corpora = check_names(given_families or [], as_names(parameters.pop("corpora", None), "corpora"))
    families = given_families or args.family
    corpora = given_corpora or args.corpus
    models = as_names(parameters.pop("models", None), "models")
    settings = parameters.pop("settings", None)
    cache_dir = parameters.pop("cache_dir", None) or args.cache_dir
    flag = parameters.pop("extract", False)
    extract = args.extract or (
        flag.strip().lower() in ("true", "1", "yes") if isinstance(flag, str) else bool(flag)
    )
    if study:
        return resolved(lambda: Grid.read(study)), cache_dir, extract
    if settings is None:
        settings = settings_from_args(args)
    else:
        settings = resolved(lambda: ExtractionSettings.from_mapping(as_mapping(settings, "settings")))
    grid = resolved(lambda: Grid.build(families, corpora, settings, models=models))
    return grid, cache_dir, extract


def _run_report(args: argparse.Namespace) -> int:
    _check_study_arguments(args, families=args.study is None)
    from rbplab.viz.export import check_formats

    formats = check_formats([f for f in args.figures.split(",") if f.strip()])
    parameters = _report_parameters(args)
    from rbplab.report import ReportOptions, run_report

    grid, cache_dir, extract = _report_request(args, parameters)
    options = ReportOptions(
        notebooks=args.notebook,
        figures=formats,
        figure_size=args.figure_size,
        missing_remedy=missing_remedy(args),
    )
    results = run_report(
        grid, args.output_dir, cache_dir=cache_dir, extract=extract, parameters=parameters, options=options
    )
    return 0 if results["ok"].all() else 1


def _configure_demo(p: argparse.ArgumentParser) -> None:
    _configure_study(p)
    p.add_argument("--output-dir", "-o", default="reports", help="where the report goes (default: reports/)")
    p.add_argument("--no-notebooks", action="store_true", help="print the tables only")


def _run_demo(args: argparse.Namespace) -> int:
    _check_study_arguments(args)
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


def _configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="a study TOML file (models/families, corpora, revisions, [settings])")
    p.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="where units run (default local)"
    )
    p.add_argument("--cache-dir", help="the shared cache (default $RBPLAB_CACHE or ~/.cache/rbplab)")
    p.add_argument("--shards-per-unit", type=positive_int, default=4, help="shards per work unit (default 4)")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="local executor: processes on this machine (default 1)",
    )
    ray = p.add_argument_group("ray executor")
    ray.add_argument("--address", help="Ray cluster address (default: a running cluster, else a local one)")
    ray.add_argument(
        "--gpus-per-task", type=float, help="GPUs per unit (default 1 when the cluster has GPUs)"
    )
    ray.add_argument(
        "--cpus-per-task", type=float, default=1, help="CPUs (torch threads) per unit (default 1)"
    )
    ray.add_argument(
        "--max-retries", type=int, default=3, help="retries of units whose worker died (default 3)"
    )
    ray.add_argument("--num-cpus", type=positive_int, help="CPUs of a local Ray cluster started for the run")
    slurm = p.add_argument_group("SLURM arrays (no Ray)")
    slurm.add_argument("--task-index", type=int, help="this task's index, e.g. $SLURM_ARRAY_TASK_ID")
    slurm.add_argument("--num-tasks", type=positive_int, help="number of tasks, e.g. $SLURM_ARRAY_TASK_COUNT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plan", action="store_true", help="print the study's cost (rbplab plan) and run nothing")
    add_cost_arguments(p)
    _configure_format(p)


def _run_study_file(args: argparse.Namespace) -> int:
    from rbplab.grid import Grid
    from rbplab.runner import RayOptions, run_study

    if args.plan:
        return run_study_plan(args)
    if args.executor != "ray" and (args.address or args.gpus_per_task is not None):
        raise InvalidArgumentError("--address and --gpus-per-task need --executor ray")
    options = RayOptions(
        address=args.address,
        gpus_per_task=args.gpus_per_task,
        cpus_per_task=args.cpus_per_task,
        max_retries=args.max_retries,
        num_cpus=args.num_cpus,
    )
    result = run_study(
        Grid.read(args.study),
        executor=args.executor,
        cache_dir=args.cache_dir,
        ray=options,
        task_index=args.task_index,
        num_tasks=args.num_tasks,
        shards_per_unit=args.shards_per_unit,
        workers=args.workers,
        progress=not args.no_progress,
    )
    table = result.table.assign(key=result.table["key"].str[:12]) if args.format == "table" else result.table
    print_table(table, args.format)
    if args.format == "table":
        print(f"{len(table)} entries in {result.seconds:.1f} s (planning {result.plan_seconds:.1f} s)")
    return 0 if result.ok else 1


register(
    "plan",
    "what a grid will cost before it runs: cache state, tokens, FLOPs, memory, time",
    configure_plan,
    run_plan,
)
register(
    "run", "run a study file's grid (local, Ray or a SLURM array slice)", _configure_run, _run_study_file
)
register(
    "fit",
    "scaling fits of -log RBP_k versus S from the cache (a missing run is an error; --extract computes it)",
    _configure_fit,
    _run_fit,
)
register(
    "report",
    "run every notebook headless into an HTML report (from the cache; --extract computes missing runs)",
    _configure_report,
    _run_report,
)
register(
    "demo", "the whole pipeline on the bundled micro-suite and corpora (offline)", _configure_demo, _run_demo
)


# ---------------------------------------------------------------------------------------------


EXAMPLES = {
    "extract": """examples:
  rbplab extract --family pythia --corpus wikipedia humaneval --max-tokens 500000
  rbplab extract -m EleutherAI/pythia-160m --revision step143000 -c hub:hotpotqa --context-length 2048
  rbplab extract -m ./SmolLM2-135M.Q4_1.gguf --tokenizer HuggingFaceTB/SmolLM2-135M -c my_texts/""",
    "cache": CACHE_EXAMPLES,
    "report": """examples:
  rbplab report -c prose humaneval --figures png,pdf
  rbplab report --notebook 01 02 --params batch.yaml -p ks '[1, 5, 50]'   # notebooks by number or stem
  rbplab report studies/micro-checkpoints.toml --notebook 06_training_dynamics""",
    "fit": """examples:
  rbplab fit -c prose --k 1 10 100
  rbplab fit -f pythia -c hub:wikipedia --max-tokens 500000 --extract   # runs the models it lacks""",
}


_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<value>[^'\s]*)'? \(choose from (?P<choices>.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped choice (a subcommand, a --format, ...);
    subparsers are made of the same class."""

    def error(self, message: str):  # type: ignore[override]
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = [c.strip().strip("'\"") for c in match.group("choices").split(",")]
            hint = did_you_mean(match.group("value"), choices)
            if hint:
                message = f"{message[: match.start()]}invalid choice: {match.group('value')!r}{hint}"
        super().error(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        # argparse leaves a subcommand's unknown option to the top level, which shows the top-level
        # usage; the subcommand says it instead, with the closest of its own options.
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = _chosen_parser(self, namespace)
            first = next((e for e in extras if e.startswith("-")), extras[0])
            hint = did_you_mean(first.split("=", 1)[0], _options(command)) if first.startswith("-") else ""
            command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace


def _chosen_parser(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser the arguments selected: `rbplab fit ...` -> fit's parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(namespace, action.dest, None)
            if chosen in action.choices:
                return _chosen_parser(action.choices[chosen], namespace)
    return parser


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rbplab", description="Measure and explore the Relative-Based Scaling Law of language models."
    )
    parser.add_argument("--traceback", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        child = sub.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=EXAMPLES.get(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(child)
        child.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = [a for a in argv if a != "--traceback"]
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    debug = args.traceback or os.environ.get("RBPLAB_DEBUG") not in (None, "", "0")
    try:
        status = int(args._run(args) or 0)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return status
    except BrokenPipeError:
        # `rbplab cache ls | head`: the reader has what it wanted. Point stdout at /dev/null so the
        # interpreter's final flush cannot fail again, and exit as a tool stopped by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        print(
            "rbplab: interrupted; finished shards are kept and the next run resumes from them",
            file=sys.stderr,
        )
        return 130
    except USER_ERRORS as err:
        if debug:
            raise
        print(f"rbplab: error: {one_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
