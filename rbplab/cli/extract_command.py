"""`rbplab extract`, and the grid arguments every command that names a grid shares (families,
models, corpora, a study file, the extraction settings).

What `rbplab fit`, `report` and `demo` share: the grid options (--family, --corpus, --cache-dir
and the extraction settings), --extract, the check of family and corpus names before anything slow,
and the remedy a missing run is reported with.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import HEAD_CHOICES

if TYPE_CHECKING:
    from rbplab.extraction.plan import ExtractResult

DTYPES = ("auto", "float32", "bfloat16", "float16")
# The short names people type (PyTorch's and most papers'), for the names the settings take.
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp16": "float16", "f16": "float16"}


def dtype_name(text: str) -> str:
    """--dtype's value, an alias (fp32, bf16, fp16) read as its full name; anything else is left
    for argparse's choices check, which suggests the closest name."""
    return DTYPE_ALIASES.get(text.strip().lower(), text)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def configure_extract(p: argparse.ArgumentParser) -> None:
    which = p.add_argument_group("what to extract")
    which.add_argument(
        "--model",
        "-m",
        nargs="+",
        action="extend",
        default=[],
        metavar="MODEL",
        help="registry short name (`rbplab families`), hub id, local HF directory or .gguf file",
    )
    which.add_argument(
        "--family",
        "-f",
        nargs="+",
        action="extend",
        default=[],
        metavar="FAMILY",
        help="every member of a registry family",
    )
    which.add_argument(
        "--corpus",
        "-c",
        nargs="+",
        action="extend",
        default=[],
        required=True,
        metavar="CORPUS",
        help="bundled name (`rbplab corpora`), hub:<name>[@<revision>], or a .txt/.jsonl[.gz] file "
        "or directory",
    )
    which.add_argument(
        "--max-documents", type=positive_int, help="use only the first N documents of each corpus"
    )
    model = p.add_argument_group("model loading")
    model.add_argument(
        "--revision",
        help="revision(s) of every --model/--family: a hub branch, tag or commit, a checkpoint "
        "(step143000, step-781), several separated by commas, or log:N (N log-spaced checkpoints "
        "from the model's schedule, e.g. log:5)",
    )
    model.add_argument("--gguf-file", help="GGUF file name inside a model directory")
    model.add_argument("--tokenizer", help="tokenizer source (required for a GGUF file without one)")
    model.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow Python code shipped with a model (auto_map) to run; off by default, enters the cache key",
    )
    add_settings_arguments(p)
    p.add_argument("--cache-dir", help="cache location (default $RBPLAB_CACHE or ~/.cache/rbplab)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_settings_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `ExtractionSettings`, shared by every command that reads or fills the cache."""
    g = p.add_argument_group("extraction settings (the same for extract, fit, report and demo)")
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
        "bf16/fp16 body on CUDA with Triton, else fp32); both give float64's counts, so it is not in "
        "the cache key",
    )


def grid_from_args(args: argparse.Namespace):
    """The grid `rbplab extract` runs: every --family member and --model, at --revision, on the
    --corpus corpora (models resolved first, with the loading options given to every model: a
    missing bundled model says how to get the data)."""
    from rbplab.catalog.corpora import open_corpus
    from rbplab.catalog.models import resolve_family, resolve_member
    from rbplab.grid import Grid

    if not args.model and not args.family:
        raise InvalidArgumentError("give at least one --model or --family (see `rbplab families`)")
    options = {
        "gguf_file": args.gguf_file,
        "tokenizer": args.tokenizer,
        "trust_remote_code": args.trust_remote_code,
    }
    members = [ref for family in args.family for ref in resolve_family(family, **options)]
    members += [resolve_member(name, **options) for name in args.model]
    for ref in members:  # before any weights are loaded
        _check_context(ref.label, ref.max_context, args.context_length)
    corpora = [open_corpus(name, max_documents=args.max_documents) for name in check_names([], args.corpus)]
    wanted = [r for r in (args.revision or "").split(",") if r.strip()]
    # Revisions are checked against every model's schedule before any weights are loaded.
    return Grid.from_names(members, corpora, settings_from_args(args), revisions=wanted or None)


def _check_context(label: str, limit: int | None, context_length: int | None) -> None:
    """Refuse a context longer than the registry says a model supports."""
    if context_length is not None and limit is not None and context_length > limit:
        raise InvalidArgumentError(
            f"--context-length {context_length} is longer than {label} supports ({limit} tokens)"
        )


def settings_from_args(args: argparse.Namespace):
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
    )


def run_extract(args: argparse.Namespace) -> int:
    from rbplab.store.files import CacheLocationError, cache_root, check_writable

    # Everything that can be checked without torch is checked before any model is touched.
    grid = grid_from_args(args)
    root = cache_root(args.cache_dir)
    try:
        check_writable(root)
    except CacheLocationError:
        if not root.is_dir():
            raise
        # An existing cache that cannot be written (a shared, read-only mount) still serves hits;
        # a run that needs to write fails with this same error before loading any weights.

    def say(model: str, corpus: str, n_tokens: int, from_cache: bool, key: str, path) -> None:
        state = "cached" if from_cache else "extracted"
        print("\t".join(str(c) for c in (model, corpus, f"{n_tokens} tokens", state, key[:12], path)))

    # A grid the cache already holds is answered from plan records, as `rbplab fit` reads it:
    # planning would import torch and transformers and describe every model (seconds) to learn
    # keys the records already give.
    hits = recorded_hits(grid, root)
    if hits is not None:
        for hit in hits:
            say(*hit)
        return 0

    from rbplab.extraction.pipeline import extract

    def said(result: ExtractResult) -> None:
        say(result.model, result.corpus, result.n_tokens, result.from_cache, result.key, result.path)

    extract(grid, cache_dir=root, progress=not args.no_progress, on_result=said)
    return 0


def recorded_hits(grid, root) -> list[tuple] | None:
    """(model, corpus, tokens, True, key, path) of every run of `grid`, models outer as `extract`
    runs them, when the lookup `rbplab fit` makes (`rbplab.study.study.resolve_entries`: plan
    records, any shard size when none is asked) finds each complete, its manifest passing its
    rules, its shard files all on disk at their recorded sizes, and its shards holding the rows
    its plan record says the corpus gives (what a cache hit checks, the count from the record an
    earlier extraction wrote instead of tokenizing the corpus again); None when one is not, so
    `extract` runs the grid and checks it in full. Model code is imported only for a run
    without a plan record."""
    from rbplab.catalog.corpora import LazyCorpus
    from rbplab.extraction.fingerprints import known_plan
    from rbplab.store.cache.reading import CacheError
    from rbplab.study.study import resolve_entries

    hits = []
    for resolved in resolve_entries(grid, root, outer="model"):
        entry, run = resolved.entry, resolved.run
        if not entry.is_complete():
            return None
        try:
            manifest = entry.manifest(mark_damaged=False)  # extract itself marks and repairs
        except CacheError:
            return None
        if entry.shard_file_problems(manifest):
            return None
        found = known_plan(run.model, run.corpus, grid.settings, root)
        if found is None or found.key != entry.key:
            return None
        # A hub corpus's documents are not read for a cached entry, so a hit is not counted
        # against them (cache_hit skips it too); any other entry holds the rows its record keeps.
        unread = isinstance(run.corpus, LazyCorpus) and not run.corpus.loaded
        rows = tuple(int(record["rows"]) for record in manifest["shards"])
        if not unread and found.rows != rows:
            return None  # counts never derived, or the entry lost shards since (issue 31)
        hits.append((run.label, str(run.corpus.name), int(manifest["n_tokens"]), True, entry.key, entry.path))
    return hits


def configure_study(p: argparse.ArgumentParser, models: bool = True) -> None:
    """The grid options of fit, report and demo; `models`: --model too, as extract takes it (the
    demo runs one family with its checkpoints)."""
    if models:
        p.add_argument(
            "--model",
            "-m",
            nargs="+",
            action="extend",
            default=[],
            metavar="MODEL",
            help="models by name, as rbplab extract takes them (registry short name, hub id, local "
            "directory or .gguf file), with or instead of --family",
        )
    p.add_argument(
        "--family",
        "-f",
        nargs="+",
        action="extend",
        default=None,
        metavar="FAMILY",
        help="registry families (default: micro, unless --model is given)",
    )
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
    if args.family is None:  # --family defaults to micro only when no --model names the models
        args.family = [] if getattr(args, "model", None) else ["micro"]
    corpora = check_names(args.family if families else [], args.corpus)
    if args.corpus:
        args.corpus = corpora


def check_names(families: list[str], corpora: list[str] | None) -> list[str] | None:
    """Each family known to the registry and each corpus a known name or an existing path, else a
    one-line error; the corpora in their canonical spelling."""
    from rbplab.catalog.corpora import corpus_name
    from rbplab.catalog.registry import family_models

    for family in families:
        family_models(family)
    return [corpus_name(c) for c in corpora] if corpora else corpora


def missing_remedy(args: argparse.Namespace) -> str:
    """How the CLI says to compute missing runs: the user's own command with --extract, less a
    `--head fused` this machine cannot run (the head changes no rank, so the command then works);
    a CUDA device this machine lacks is kept (it decides the dtype, so the key) and named."""
    import shlex

    from rbplab.extraction.fingerprints import cpu_only
    from rbplab.extraction.heads import runnable_here

    argv = [a for a in getattr(args, "argv", []) if a != "--extract"]
    settings = settings_from_args(args)
    if not runnable_here(settings):
        argv = _without_option(argv, "--head")
    command = shlex.join(["rbplab", *argv, "--extract"])
    if settings.device.startswith("cuda") and cpu_only(settings.with_changes(device="auto")):
        # the device asked for decides the dtype "auto" (so the key): the command stays, and where
        return f"--extract on a machine with CUDA (this one has none): {command}"
    return f"--extract: {command}"


def _without_option(argv: list[str], option: str) -> list[str]:
    """`argv` without `option` and its value (`--head fused` or `--head=fused`)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out
