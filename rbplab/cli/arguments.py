"""The arguments several commands share, each declared once: value types, --cache-dir, and the
grid options with the `Grid` they name.

Every command that takes a grid (`extract`, `plan`, `fit`, `report`, `demo`) declares it with
`add_grid_arguments` and builds it with `grid_from_args`, so a flag means the same thing in
each. --model/-m, --family/-f and --corpus/-c take one or more values and accumulate over
repeats: `-c prose -c humaneval` is `-c prose humaneval`. Names are checked when the grid is
built, before anything imports torch or looks in the cache; a bad one is one line naming its
option (`--corpus: corpus name '' is empty: ...`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import HEAD_CHOICES

if TYPE_CHECKING:
    from rbplab.core.settings import ExtractionSettings
    from rbplab.grid import Grid

DTYPES = ("auto", "float32", "bfloat16", "float16")
# The short names people type (PyTorch's and most papers'), for the names the settings take.
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp16": "float16", "f16": "float16"}
# The family a command with defaults runs when no --family or --model names the models.
DEFAULT_FAMILY = "micro"


def dtype_name(text: str) -> str:
    """--dtype's value, an alias (fp32, bf16, fp16) read as its full name; anything else is left
    for argparse's choices check, which suggests the closest name."""
    return DTYPE_ALIASES.get(text.strip().lower(), text)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def layer_value(text: str) -> int | float | str:
    """One --layers value: "all", a layer index (an integer: 3) or a relative depth (a decimal:
    0.5, 1.0); the settings check the list (`rbplab.core.settings.check_layers`)."""
    text = text.strip()
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'all', a layer index (3) or a relative depth (0.5, 1.0), got {text!r}"
        ) from None


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def add_cache_dir_argument(p: argparse.ArgumentParser, *, shown: bool = True) -> None:
    """--cache-dir; `shown` False keeps it out of the help (a subcommand that takes its parent's)."""
    p.add_argument(
        "--cache-dir",
        default=None if shown else argparse.SUPPRESS,
        help="cache location (default $RBPLAB_CACHE or ~/.cache/rbplab)" if shown else argparse.SUPPRESS,
    )


def add_grid_arguments(p: argparse.ArgumentParser, *, defaults: bool, one_family: bool = False) -> None:
    """The grid options of a command, its extraction settings and --cache-dir.

    defaults: no --family and no --model is the micro family, and no --corpus every bundled
    corpus (fit, report, demo); without, each is an error naming the option (extract, plan).
    one_family: the demo's grid, one --family with its checkpoints on named corpora, so no
    --model, --revision, --max-documents or model loading options."""
    which = p.add_argument_group("the grid (the same options in extract, plan, fit, report and demo)")
    names: list[argparse.Action] = []
    if not one_family:
        names.append(
            which.add_argument(
                "--model",
                "-m",
                nargs="+",
                action="extend",
                default=[],
                metavar="MODEL",
                help="models: registry short name (`rbplab families`), hub id, local HF directory or "
                ".gguf file; repeatable",
            )
        )
    unless = "" if one_family else ", unless --model is given"
    names.append(
        which.add_argument(
            "--family",
            "-f",
            nargs="+",
            action="extend",
            default=[],
            metavar="FAMILY",
            help="every member of registry families; repeatable"
            + (f" (default: {DEFAULT_FAMILY}{unless})" if defaults else ""),
        )
    )
    names.append(
        which.add_argument(
            "--corpus",
            "-c",
            nargs="+",
            action="extend",
            default=[],
            metavar="CORPUS",
            help="bundled name (`rbplab corpora`), hub:<name>[@<revision>], or a .txt/.jsonl[.gz] file "
            "or directory; repeatable" + (" (default: every bundled corpus)" if defaults else ""),
        )
    )
    if not one_family:
        names.append(
            which.add_argument(
                "--revision",
                help="revision(s) of every --model/--family: a hub branch, tag or commit, a checkpoint "
                "(step143000, step-781), several separated by commas, or log:N (N log-spaced "
                "checkpoints from the model's schedule, e.g. log:5)",
            )
        )
        names.append(
            which.add_argument(
                "--max-documents", type=positive_int, help="use only the first N documents of each corpus"
            )
        )
        model = p.add_argument_group("model loading")
        names.append(model.add_argument("--gguf-file", help="GGUF file name inside a model directory"))
        names.append(
            model.add_argument("--tokenizer", help="tokenizer source (required for a GGUF file without one)")
        )
        names.append(
            model.add_argument(
                "--trust-remote-code",
                action="store_true",
                help="allow Python code shipped with a model (auto_map) to run; off by default, enters "
                "the cache key",
            )
        )
    add_settings_arguments(p)
    add_cache_dir_argument(p)
    # What grid_from_args and grid_options_given read: the options that name models and corpora.
    p.set_defaults(
        grid_defaults=defaults,
        grid_options=tuple((a.dest, a.option_strings[0], a.default) for a in names),
    )


def add_settings_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `ExtractionSettings`, part of every command's grid options."""
    g = p.add_argument_group("extraction settings (the same for extract, plan, fit, report and demo)")
    g.add_argument(
        "--context-length",
        type=positive_int,
        help="window length in tokens (default: the model's maximum, at most 2048)",
    )
    g.add_argument(
        "--stride",
        type=positive_int,
        help="window step; < context length overlaps windows and scores only new tokens",
    )
    g.add_argument("--bos", default="auto", choices=["auto", "always", "never"], help="BOS token policy")
    g.add_argument(
        "--max-tokens", type=positive_int, help="stop after scoring this many tokens per model and corpus"
    )
    g.add_argument(
        "--include-padded-vocab",
        action="store_true",
        help="rank over the padded output rows too (default: the tokenizer's vocabulary)",
    )
    g.add_argument(
        "--dtype",
        type=dtype_name,
        default="auto",
        choices=DTYPES,
        help="weights' dtype; fp32, bf16 and fp16 name float32, bfloat16 and float16 (default: auto, "
        "the config's dtype on an accelerator, float32 on a CPU)",
    )
    g.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps, ...")
    g.add_argument("--device-map", help="e.g. auto, to spread a large model over several devices")
    g.add_argument(
        "--batch-tokens",
        type=positive_int,
        default=None,
        help="padded tokens per forward pass (default: 16,384 on a GPU, 2,048 on a CPU)",
    )
    g.add_argument(
        "--shard-tokens",
        type=positive_int,
        help="scored tokens per cache shard, the unit of resuming (default 65536 when extracting); "
        "without it a lookup takes the run cut at any size",
    )
    g.add_argument(
        "--head",
        default="auto",
        choices=HEAD_CHOICES,
        help="the output head that ranks: fp32 (IEEE float32 logits in chunks, any device), fused (a "
        "Triton kernel on CUDA: tensor cores for half-precision bodies) or auto (default: fused for a "
        "bf16/fp16 body on CUDA with Triton, else fp32); both give exact arithmetic's counts, so it is "
        "not in the cache key",
    )
    g.add_argument(
        "--layers",
        nargs="+",
        type=layer_value,
        metavar="LAYER",
        help="the layers whose ranks are read: all, layer indices (0 3 11) or relative depths (0.25 0.5 "
        "1.0; 1.0 is the final layer); a layer before the last is read through the logit lens (the "
        "model's final norm and head), all from one forward pass (default: the final layer)",
    )


def settings_from_args(args: argparse.Namespace) -> ExtractionSettings:
    """The ExtractionSettings named by the command line's options (validated there)."""
    from rbplab.core.settings import ExtractionSettings

    return ExtractionSettings(
        context_length=args.context_length,
        stride=args.stride,
        bos=args.bos,
        max_tokens=args.max_tokens,
        include_padded_vocab=args.include_padded_vocab,
        dtype=args.dtype,
        device=args.device,
        device_map=args.device_map,
        batch_tokens=args.batch_tokens,
        shard_tokens=args.shard_tokens,
        head=args.head,
        layers="all" if args.layers == ["all"] else args.layers,
    )


# Where a run computes, not what: a study file may be planned or run on a device the command names.
PLACEMENT = ("device", "device_map")


def grid_options_given(args: argparse.Namespace) -> list[str]:
    """The grid options the command line gave (each by its flag), settings included: what a
    study file, which names its own grid, is refused beside (`PLACEMENT` is not refused)."""
    given = [flag for dest, flag, default in args.grid_options if getattr(args, dest) != default]
    changed = settings_from_args(args).to_dict(changed_only=True)
    return given + [f"--{name.replace('_', '-')}" for name in changed if name not in PLACEMENT]


def refuse_study_with_grid_options(args: argparse.Namespace) -> None:
    """A study file names its own grid: grid options beside it are a one-line error naming them."""
    given = grid_options_given(args)
    if given:
        raise InvalidArgumentError(
            f"give a study file or grid options, not both: the study file names the grid ({', '.join(given)})"
        )


def revisions_from_args(args: argparse.Namespace) -> list[str] | None:
    """--revision's comma-separated names (None when not given)."""
    wanted = [r.strip() for r in (getattr(args, "revision", None) or "").split(",") if r.strip()]
    return wanted or None


def grid_from_args(args: argparse.Namespace) -> Grid:
    """The grid the command line names: every --family member and --model (with the model
    loading options), at --revision, on the --corpus corpora (each cut to --max-documents),
    under the settings options. Families, models and corpora are resolved here, each failure one
    line naming its option, before any weights are loaded; a context longer than a registered
    model supports is refused here too."""
    from rbplab.catalog.corpora import CorpusError, corpus_name, open_corpus
    from rbplab.catalog.models import resolve_family, resolve_member
    from rbplab.catalog.registry import UnknownFamilyError, UnknownModelError
    from rbplab.grid import Grid

    families, models = list(args.family), list(getattr(args, "model", []))
    if not families and not models:
        if not args.grid_defaults:
            raise InvalidArgumentError("give at least one --model or --family (see `rbplab families`)")
        families = [DEFAULT_FAMILY]
    if not args.corpus and not args.grid_defaults:
        raise InvalidArgumentError("give at least one --corpus (see `rbplab corpora`)")
    options = {
        "gguf_file": getattr(args, "gguf_file", None),
        "tokenizer": getattr(args, "tokenizer", None),
        "trust_remote_code": getattr(args, "trust_remote_code", False),
    }
    with _named("--family", UnknownFamilyError):
        members = [ref for family in families for ref in resolve_family(family, **options)]
    with _named("--model", UnknownModelError):
        members += [resolve_member(name, **options) for name in models]
    for ref in members:  # before any weights are loaded
        _check_context(ref.label, ref.max_context, args.context_length)
    with _named("--corpus", CorpusError):
        corpora = list(dict.fromkeys(corpus_name(name) for name in args.corpus))  # a repeat runs once
    max_documents = getattr(args, "max_documents", None)
    if max_documents is not None:
        corpora = [open_corpus(name, max_documents=max_documents) for name in corpora]
    # Revisions are checked against every model's schedule before any weights are loaded.
    return Grid.from_names(
        members, corpora or None, settings_from_args(args), revisions=revisions_from_args(args)
    )


@contextlib.contextmanager
def _named(option: str, kind: type[Exception]) -> Iterator[None]:
    """Re-raise an error of class `kind` with `option` before its message: the option is what
    the user wrote, the message says what is wrong with its value."""
    try:
        yield
    except kind as err:
        raise kind(f"{option}: {err}") from None


def _check_context(label: str, limit: int | None, context_length: int | None) -> None:
    """Refuse a context longer than the registry says a model supports."""
    if context_length is not None and limit is not None and context_length > limit:
        raise InvalidArgumentError(
            f"--context-length {context_length} is longer than {label} supports ({limit} tokens)"
        )
