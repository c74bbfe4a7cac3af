"""The `rbplab` command line.

Each command family lives in a module of its own (`extract_command`, `cache_command`,
`catalog_command`, `study_command` for plan and run, `report_command` for fit and report,
`demo_command`), over the arguments they share (`arguments`: the grid options and more). This
module assembles the parser from COMMANDS (name -> Command, added by `register()`), configuring
only the subcommand a command line names, and dispatches.
A user error (unknown model, empty corpus, unwritable cache, ...)
prints one line and exits with status 1; `--traceback` (or RBPLAB_DEBUG=1) shows the full trace
instead. A warning of rbplab's (a damaged entry recomputed, a summary derived again) prints as one
`rbplab: warning: ...` line, without the file and source line Python's default shows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from rbplab.cli.cache_command import CACHE_EXAMPLES, CACHE_HELP, configure_cache, run_cache
from rbplab.cli.catalog_command import configure_families, configure_size, run_corpora, run_families, run_size
from rbplab.cli.demo_command import configure_demo, run_demo_command
from rbplab.cli.extract_command import configure_extract, run_extract
from rbplab.cli.output import USER_ERRORS, add_format_argument, one_line
from rbplab.cli.report_command import (
    FIT_EXAMPLES,
    REPORT_EXAMPLES,
    configure_fit,
    configure_report,
    run_fit,
    run_report_command,
)
from rbplab.cli.study_command import configure_plan, configure_run, run_plan, run_study_file
from rbplab.core.errors import RbplabWarning, did_you_mean


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
# The subcommands, in the order `rbplab --help` lists them. The modules import what a command
# runs (torch, the notebook stack) only when it runs, so `rbplab cache ls` does not pay for it.

register(
    "extract",
    "compute per-token rank statistics (model x corpus) into the cache",
    configure_extract,
    run_extract,
)
register("cache", CACHE_HELP, configure_cache, run_cache)
register("families", "model families of the registry and their sizes S", configure_families, run_families)
register("corpora", "bundled and hub corpora", add_format_argument, run_corpora)
register("size", "non-embedding parameter count S of a model", configure_size, run_size)
register(
    "plan",
    "what a grid will cost before it runs: cache state, tokens, FLOPs, memory, time",
    configure_plan,
    run_plan,
)
register("run", "run a study file's grid (local, Ray or a SLURM array slice)", configure_run, run_study_file)
register(
    "fit",
    "scaling fits of -log RBP_k versus S from the cache (a missing run is an error; --extract computes it)",
    configure_fit,
    run_fit,
)
register(
    "report",
    "run every notebook headless into an HTML report (from the cache; --extract computes missing runs)",
    configure_report,
    run_report_command,
)
register(
    "demo",
    "the whole pipeline on the bundled micro-suite and corpora (offline)",
    configure_demo,
    run_demo_command,
)


EXAMPLES = {
    "extract": """examples:
  rbplab extract --family pythia --corpus wikipedia humaneval --max-tokens 500000
  rbplab extract -m EleutherAI/pythia-160m --revision step143000 -c hub:hotpotqa --context-length 2048
  rbplab extract -m ./SmolLM2-135M.Q4_1.gguf --tokenizer HuggingFaceTB/SmolLM2-135M -c my_texts/""",
    "cache": CACHE_EXAMPLES,
    "report": REPORT_EXAMPLES,
    "fit": FIT_EXAMPLES,
}


_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<value>[^'\s]*)'? \(choose from (?P<choices>.*)\)$")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written, and each option's default at the end of its help
    unless the help already names it (or there is none to name: no value, a flag, a list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False  # a flag (0, a number, is shown)
            or default == argparse.SUPPRESS
            or default == []
            or action.option_strings == []  # a positional: required, or its help says what it is
        ):
            return text
        shown = ", ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"default: {shown}"


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped choice (a subcommand, a --format, ...), and
    defaults in the help (`HelpFormatter`); subparsers are made of the same class."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

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


def build_parser(configure: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The `rbplab` parser. Every subcommand is listed; only those named in `configure` (default:
    all) get their arguments, so a command line pays for its own subcommand's options alone."""
    parser = Parser(
        prog="rbplab", description="Measure and explore the Relative-Based Scaling Law of language models."
    )
    parser.add_argument("--traceback", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = set(COMMANDS if configure is None else configure)
    for name, command in COMMANDS.items():
        child = sub.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=EXAMPLES.get(name),
        )
        if name in chosen:
            command.configure(child)
        child.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the subcommand is the first word that is not an option (the only top-level option is a flag)
    named = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([named] if named in COMMANDS else [])
    args = parser.parse_args(argv)
    args.argv = [a for a in argv if a != "--traceback"]
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    debug = args.traceback or os.environ.get("RBPLAB_DEBUG") not in (None, "", "0")
    try:
        with warning_lines():
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


def is_rbplab_warning(category: type[Warning], module: str) -> bool:
    """Whether a warning is rbplab's: of `RbplabWarning`, or raised by a module of rbplab's."""
    return issubclass(category, RbplabWarning) or module == "rbplab" or module.startswith("rbplab.")


def _warning_module() -> str:
    """The module that called `warnings.warn` for the warning being shown: the first frame past
    the display hook and the warnings module. Not the frame its stacklevel names, which may lie
    outside rbplab (a caller's, a thread's bootstrap) for a warning rbplab raised."""
    frame = sys._getframe(2)  # past this function and the hook
    while frame is not None and frame.f_globals.get("__name__") == "warnings":
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


def warning_line(message: Warning | str) -> str:
    """What the command line prints for a warning of rbplab's: one line, no file, no source."""
    return f"rbplab: warning: {' '.join(str(message).split())}\n"


@contextlib.contextmanager
def warning_lines() -> Iterator[None]:
    """Show rbplab's warnings as `warning_line`s on stderr while a command runs; other warnings as
    Python shows them. Only the command line does this: a notebook keeps Python's own display,
    in which an `RbplabWarning` names itself and the user's line that led to it."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not is_rbplab_warning(category, _warning_module()):
            return previous(message, category, filename, lineno, file, line)
        stream = file if file is not None else sys.stderr
        with contextlib.suppress(OSError, AttributeError):  # no stderr, or a closed one: say nothing
            stream.write(warning_line(message))

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:  # unless the command installed a hook of its own
            warnings.showwarning = previous


if __name__ == "__main__":
    sys.exit(main())
