"""What rbplab knows about models before loading one: the families of the registry with their
sizes S (computed on the meta device), their checkpoint schedules, and the paper's reference table.

Model size S: the number of non-embedding parameters, computed without weights.

The paper (following Kaplan et al.) fits RBP against S = all parameters except
embeddings. "Embedding" here means every lookup table (token embeddings, learned
position embeddings, token-type tables: any `nn.Embedding`) plus the output head
when it is a separate matrix. A tied head shares the token-embedding matrix, so it
is counted once, as embedding. Dense projections around the embeddings (OPT-350m's
`project_in`/`project_out`) are ordinary matrix multiplies and count towards S.

`max_context` and `logit_softcap` are the two other facts of the architecture a plan reads from
its config. Sizes come from instantiating the architecture on PyTorch's meta device: shapes and
weight tying are real, no memory is allocated and nothing is downloaded, so the
numbers stay in step with transformers' own module definitions instead of a
hand-maintained formula per architecture.

Checkpoint schedules: which revisions of a model exist and how far into training each one is.

A schedule knows, for every revision, the optimiser step, the tokens seen D = step x tokens_per_step
and the training compute C ~= 6 S D (S the non-embedding parameters, Kaplan et al. 2020), so a
data- or compute-scaling study can be planned and fitted without loading a single weight.

- Pythia (Biderman et al. 2023): ``step0``, ``step1``, ``step2``, ``step4``, ... ``step512``, then every
  1000 steps to ``step143000`` (154 checkpoints); 2,097,152 tokens per step (1024 x 2048);
  ``main`` is ``step143000``.
- The micro-suite (scripts/train_micro.py): revisions ``step-<n>``; tokens per step SEQ x BATCH
  (256 x 8 = 2048). Its checkpoints live on disk, so its schedule is read from the model directory:
  ``checkpoints/schedule.json`` written by the training script (intermediate checkpoints in
  ``checkpoints/step-<n>/``, the final model in the directory itself), or, for models trained before
  checkpoints were kept, only the final step recorded in ``data/models/micro.json``.

``select`` turns a study file's ``revisions`` value into revisions: a list of names, or ``"log:N"``
for N log-spaced existing checkpoints (step 0 excluded: it has seen no data), always ending at the
final one. A revision that does not exist is an `UnknownRevisionError` listing the available ones.

The paper's own measurements, bundled as a reference table (data/reference/).

`paper_reference()` reads the GPT-2 results on Wikipedia that the paper's code repository
published (scripts/build_reference.py records the repository, commit and paths, and the setup:
the optimistic tie convention, fp32, 1,000 sequences of 512 tokens). A user who runs GPT-2 on
Wikipedia can draw their points beside the paper's (`rbplab.viz.plots.reference_vs_size`);
their own runs use their own tie convention and corpus, which the figure states.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rbplab.catalog.names import name_problem, path_exists, shown
from rbplab.core.documents import Fields, ListOf, read_json
from rbplab.core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    MissingFileError,
    RbplabError,
    did_you_mean,
)
from rbplab.core.runs import training_compute
from rbplab.store.paths import DATA_ENV, data_dir

COLUMNS = ("family", "model", "source", "S", "n_params", "vocab_size", "head_rows", "max_context", "tied")
_INT_COLUMNS = ("S", "n_params", "vocab_size", "head_rows")


class UnknownModelError(RbplabError, ValueError):
    """A model name that is neither registered, a local path, nor a hub id."""


class UnknownFamilyError(RbplabError, ValueError):
    """A family name not in the registry."""


def registry_path() -> Path:
    """The model registry: $RBPLAB_DATA/families.csv when that folder carries its own, else the
    package's."""
    own = data_dir(required=False)
    if own is not None and os.environ.get(DATA_ENV) and (own / "families.csv").is_file():
        return own / "families.csv"
    return Path(str(resources.files("rbplab.catalog").joinpath("families.csv")))


# The parsed registry by (path, modification time, size): one process reads the CSV once, however
# many names it resolves, and still sees a registry rewritten meanwhile (scripts/build_registry.py).
_PARSED: dict[tuple[str, int, int], pd.DataFrame] = {}


def families(path: str | Path | None = None) -> pd.DataFrame:
    """Every registered model, one row each, ordered by family then S.

    Columns: family, model (short name), source (hub id or repo-relative path), S
    (non-embedding parameters), n_params, vocab_size (tokenizer |V|), head_rows (output
    layer rows, >= vocab_size when padded), max_context, tied, and any extra columns of the CSV.
    The CSV is parsed once per process (again only when it changes); each call gets its own copy.
    """
    csv = Path(path) if path is not None else registry_path()
    if not csv.is_file():
        raise MissingFileError(
            f"model registry not found at {csv}; run scripts/build_registry.py (it writes "
            "rbplab/catalog/families.csv)"
        )
    stat = csv.stat()
    memo = (str(csv.resolve()), stat.st_mtime_ns, stat.st_size)
    if memo not in _PARSED:
        _PARSED.clear()  # one registry is in use at a time; an older parse is never asked for again
        _PARSED[memo] = _parse(csv)
    return _PARSED[memo].copy()


def _parse(csv: Path) -> pd.DataFrame:
    table = pd.read_csv(csv, dtype={"family": str, "model": str, "source": str})
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise InvalidArgumentError(f"{csv} lacks columns {missing}; expected at least {list(COLUMNS)}")
    for column in _INT_COLUMNS:
        table[column] = table[column].astype("int64")
    table["max_context"] = table["max_context"].astype("Int64")
    table["tied"] = table["tied"].astype(str).str.lower().map({"true": True, "false": False}).astype(bool)
    return table.sort_values(["family", "S"], kind="stable").reset_index(drop=True)


def family_names() -> list[str]:
    return sorted(families()["family"].unique())


def family_models(family: str) -> pd.DataFrame:
    """Members of one family, smallest S first."""
    table = families()
    rows = table[table["family"].str.lower() == family.lower()]
    if rows.empty:
        names = sorted(table["family"].unique())
        raise UnknownFamilyError(
            f"unknown model family {shown(family)}; known families: {', '.join(names)}"
            f"{did_you_mean(family, names)}"
        )
    return rows.reset_index(drop=True)


def source_location(source: str) -> str:
    """A loadable name: hub ids unchanged, repo-relative paths made absolute (in the bundled data
    folder, wherever that is; DataNotFoundError says how to get it when it is missing)."""
    return _location(source, data_dir() if _is_repo_relative(source) else None)


def _location(source: str, data: Path | None) -> str:
    if data is not None and _is_repo_relative(source):
        return str(data / source.removeprefix("data/"))  # "data/models/micro-1-25K"
    return source


def lookup_model(name: str) -> pd.Series | None:
    """The registry row whose short name or source equals `name` (case-insensitive), else None.

    Absolute paths of in-repo models match too, so cache manifests written with a
    resolved path still find their S.
    """
    table = families()
    key = name.lower().rstrip("/")
    data = data_dir(required=False)  # matching names needs no bundled data
    resolved = table["source"].map(lambda source: _location(source, data)).str.lower()
    match = table[
        (table["model"].str.lower() == key) | (table["source"].str.lower() == key) | (resolved == key)
    ]
    return None if match.empty else match.iloc[0]


def model_location(name: str) -> str:
    """What to hand to the model loader for a user-given model name.

    A registered short name or source → its source (absolute path for in-repo models);
    an existing local path (HF directory or .gguf file) → unchanged; an ``org/name`` hub id
    → unchanged (it cannot be checked offline). Anything else is an unknown model.
    """
    row = lookup_model(name)
    if row is not None:
        return source_location(row["source"])
    return unregistered_location(name)


def unregistered_location(name: str) -> str:
    """What a name `lookup_model` did not find loads from: an existing local path or an
    ``org/name`` hub id, unchanged. Anything else is an UnknownModelError listing the registered
    models; only that message reads the registry, so a caller holding the lookup's answer does
    not read it twice. A name `names.name_problem` refuses (empty, over-long) is one too."""
    problem = name_problem(name)
    if problem is not None:
        raise UnknownModelError(
            f"model name {shown(name)} {problem}: name a registered model (`rbplab families`), a "
            "local model directory or .gguf file, or an 'org/name' hub id"
        )
    if path_exists(name):
        return name
    if _looks_like_hub_id(name):
        return name
    known = list(families()["model"])
    raise UnknownModelError(
        f"unknown model {shown(name)}{did_you_mean(name, known)}: not in the registry, not an existing path, "
        f"not an 'org/name' hub id; registered models: {', '.join(known)}"
    )


def _is_repo_relative(source: str) -> bool:
    # Hub ids never start with these; local registry entries always live under data/.
    return source.startswith(("data/", "./", "../"))


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not name.startswith((".", "~"))
        and not name.endswith(".gguf")
        and not any(c.isspace() for c in name)
    )


if TYPE_CHECKING:
    import torch


MAX_CONFIG_FILE_BYTES = 64 << 20  # a config.json is a few KB; the bound keeps /dev/zero out


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one architecture; tied tensors are counted once."""

    architecture: str
    n_params: int  # every distinct parameter tensor
    n_embedding: int  # lookup tables + untied output head
    n_nonembedding: int  # S
    tied: bool  # output head shares the token-embedding matrix
    head_rows: int | None  # rows of the output layer (may exceed the tokenizer's vocabulary)
    embedding_modules: tuple[str, ...]  # names of the modules counted as embedding


def _as_config(config: Any):
    """Accept a transformers config, a dict (with "model_type"), or a path to a config.json / model dir."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config
    if isinstance(config, dict):
        fields = dict(config)
        model_type = fields.pop("model_type", None)
        if model_type is None:
            raise InvalidArgumentError(
                "a config dict needs a 'model_type' key (e.g. 'gpt2', 'gpt_neox', 'opt', 'qwen2')"
            )
        try:
            return AutoConfig.for_model(model_type, **fields)
        except (ValueError, TypeError) as err:  # an unknown model_type, a field of the wrong type
            reason = " ".join(str(err).split())
            raise InvalidArgumentError(f"not a config transformers can build: {reason[:300]}") from None
    if isinstance(config, (str, Path)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise MissingFileError(
                f"no config.json at {path}; pass a transformers config, a dict or a local model directory"
            )
        return _as_config(read_json(path, "model config", MAX_CONFIG_FILE_BYTES, shape=dict))
    raise InvalidTypeError(
        f"expected a transformers config, dict, path or torch module, got {type(config).__name__}"
    )


def meta_model(config: Any) -> torch.nn.Module:
    """The causal-LM architecture of `config`, instantiated on the meta device (no memory, no download)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _as_config(config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def parameter_counts(config_or_model: Any) -> ParamCounts:
    """Count parameters of a config (instantiated on the meta device) or of an already-built module."""
    import torch  # imported here: reading the registry or the cache needs no torch

    model = config_or_model if isinstance(config_or_model, torch.nn.Module) else meta_model(config_or_model)

    # Distinct tensors only: model.parameters() already skips tied duplicates, but we key
    # by identity explicitly because embedding modules are visited separately below.
    params = {id(p): p.numel() for p in model.parameters()}
    n_params = sum(params.values())

    embedding_ids: set[int] = set()
    names: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding):
            embedding_ids.update(id(p) for p in module.parameters(recurse=False))
            names.append(name)

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    input_weight = getattr(inputs, "weight", None)
    tied = head_weight is not None and input_weight is not None and head_weight is input_weight
    if head is not None and not tied:
        embedding_ids.update(id(p) for p in head.parameters(recurse=False))
        names.append(next((n for n, m in model.named_modules() if m is head), "output_head"))

    n_embedding = sum(params[i] for i in embedding_ids if i in params)
    return ParamCounts(
        architecture=type(model).__name__,
        n_params=n_params,
        n_embedding=n_embedding,
        n_nonembedding=n_params - n_embedding,
        tied=tied,
        head_rows=int(head_weight.shape[0]) if head_weight is not None else None,
        embedding_modules=tuple(names),
    )


def nonembedding_params(config: Any) -> int:
    """S for a transformers config, config dict, local model dir / config.json, or a torch module.

    GPT-2 124M and Pythia-160m both give 85,056,000.
    """
    return parameter_counts(config).n_nonembedding


def max_context(config: Any) -> int | None:
    """Longest input the architecture accepts, from the usual config fields."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def logit_softcap(config: Any) -> float | None:
    """The config's final-logit softcap (Gemma 2: logits = cap * tanh(logits / cap)), None without one."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(config, "final_logit_softcapping", None)
    return float(cap) if cap else None


PYTHIA_TOKENS_PER_STEP = 2_097_152  # 1024 sequences x 2048 tokens
PYTHIA_STEPS = (0, *(2**i for i in range(10)), *range(1000, 143_001, 1000))
MICRO_TOKENS_PER_STEP = 256 * 8  # scripts/train_micro.py SEQ x BATCH (a test keeps them equal)
SCHEDULE_FILE = "schedule.json"  # inside <model dir>/checkpoints/
CHECKPOINTS_DIR = "checkpoints"
LOG_SPACING = re.compile(r"^log:(\d+)$")


class UnknownRevisionError(RbplabError, ValueError):
    """A revision that the model's checkpoint schedule does not have."""


@dataclass(frozen=True)
class Schedule:
    """Checkpoints of one training run: steps that exist and tokens per optimiser step.

    `name_format` spells a step as a revision ("step{}" for Pythia, "step-{}" for the micro-suite);
    ``main`` (and None) name the final checkpoint.
    """

    name: str
    tokens_per_step: int
    steps: tuple[int, ...]
    name_format: str = "step{}"

    def __post_init__(self) -> None:
        if not self.steps or list(self.steps) != sorted(set(self.steps)) or self.steps[0] < 0:
            raise InvalidArgumentError(f"schedule {self.name}: steps must be distinct, ascending and >= 0")
        if self.tokens_per_step < 1:
            raise InvalidArgumentError(f"schedule {self.name}: tokens_per_step must be positive")

    @property
    def final_step(self) -> int:
        return self.steps[-1]

    def revision(self, step: int) -> str:
        return self.name_format.format(step)

    def revisions(self) -> list[str]:
        """Every existing revision, first to last (``main`` is the last one)."""
        return [self.revision(step) for step in self.steps]

    def step_of(self, revision: str | None) -> int:
        """The optimiser step of `revision` (None and ``main`` are the final checkpoint)."""
        if revision is None or revision == "main":
            return self.final_step
        by_name = {self.revision(step): step for step in self.steps}
        if revision not in by_name:
            raise UnknownRevisionError(
                f"{self.name} has no revision {revision!r}; available: {_summary(self.revisions())}"
            )
        return by_name[revision]

    def tokens(self, revision: str | None) -> int:
        """D: tokens seen at `revision`."""
        return self.step_of(revision) * self.tokens_per_step

    def compute(self, revision: str | None, S: float) -> float:
        """C ~= 6 S D, in FLOPs (S: non-embedding parameters)."""
        return training_compute(float(S), self.tokens(revision))

    def log_spaced(self, n: int) -> list[str]:
        """`n` existing checkpoints spaced evenly in log(step), the last being the final one.

        Each log-spaced target takes the nearest (in log step) checkpoint not yet taken; step 0 is
        never chosen (D = 0 has no place on a log axis).
        """
        positive = [step for step in self.steps if step > 0]
        if not 1 <= n <= len(positive):
            raise UnknownRevisionError(
                f"{self.name}: 'log:{n}' asks for {n} checkpoints; between 1 and {len(positive)} exist"
            )
        if n == 1:
            return [self.revision(positive[-1])]
        logs = [math.log(step) for step in positive]
        targets = [logs[0] + (logs[-1] - logs[0]) * i / (n - 1) for i in range(n)]
        chosen: set[int] = {0, len(positive) - 1}
        for target in targets[1:-1]:
            free = [i for i in range(len(positive)) if i not in chosen]
            chosen.add(min(free, key=lambda i: (abs(logs[i] - target), i)))
        return [self.revision(positive[i]) for i in sorted(chosen)]

    def select(self, wanted: str | Sequence[str]) -> list[str]:
        """Revisions named by a study file: ``"log:N"`` or names (each checked to exist)."""
        if isinstance(wanted, str):
            match = LOG_SPACING.match(wanted.strip())
            if match:
                return self.log_spaced(int(match.group(1)))
            wanted = [wanted]
        for revision in wanted:
            self.step_of(revision)
        return list(dict.fromkeys(wanted))

    def table(self, S: float | None = None) -> pd.DataFrame:
        """One row per checkpoint: revision, step, D (tokens seen) and, given S, C = 6 S D."""
        frame = pd.DataFrame({"revision": self.revisions(), "step": list(self.steps)})
        frame["D"] = frame["step"].astype("int64") * self.tokens_per_step
        if S is not None:
            frame["C"] = training_compute(float(S), frame["D"].astype(float))
        return frame


def _summary(revisions: list[str], shown: int = 12) -> str:
    if len(revisions) <= shown:
        return ", ".join(revisions)
    half = shown // 2
    return f"{', '.join(revisions[:half])}, ... {', '.join(revisions[-half:])} ({len(revisions)} in all)"


PYTHIA = Schedule("pythia", PYTHIA_TOKENS_PER_STEP, PYTHIA_STEPS, "step{}")
FAMILY_SCHEDULES = {"pythia": PYTHIA}


def micro_schedule(
    steps: Sequence[int], tokens_per_step: int = MICRO_TOKENS_PER_STEP, name: str = "micro"
) -> Schedule:
    """The schedule of a micro-suite model checkpointed at `steps` (the last is the final model)."""
    return Schedule(name, int(tokens_per_step), tuple(sorted(int(s) for s in steps)), "step-{}")


def checkpoint_revision(step: int) -> str:
    """How the training script names the checkpoint directory of `step` (``step-<n>``)."""
    return f"step-{int(step)}"


def write_local_schedule(model_dir: str | Path, steps: Sequence[int], tokens_per_step: int) -> Path:
    """Write ``<model_dir>/checkpoints/schedule.json`` (used by scripts/train_micro.py)."""
    folder = Path(model_dir) / CHECKPOINTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SCHEDULE_FILE
    steps = sorted(int(s) for s in steps)
    data = {
        "tokens_per_step": int(tokens_per_step),
        "steps": steps,
        "final_step": steps[-1],
        "revisions": [checkpoint_revision(s) for s in steps],
        "final_revision": "main",
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


MAX_SCHEDULE_BYTES = 16 << 20  # a schedule lists a few hundred steps
_SCHEDULE_SHAPE = Fields(
    {"steps": ListOf(int), "tokens_per_step": int}, required=("steps", "tokens_per_step")
)
_SUMMARY_SHAPE = Fields({"models": ListOf(Fields({"name": str, "steps": int}))}, required=("models",))


def local_schedule(model_dir: str | Path, name: str | None = None) -> Schedule | None:
    """The schedule of a local model directory from its ``checkpoints/schedule.json``, if it has one."""
    path = Path(model_dir) / CHECKPOINTS_DIR / SCHEDULE_FILE
    if not path.is_file():
        return None
    data = read_json(path, "checkpoint schedule", MAX_SCHEDULE_BYTES, shape=_SCHEDULE_SHAPE)
    return micro_schedule(data["steps"], data["tokens_per_step"], name or Path(model_dir).name)


def _trained_steps(model_dir: Path) -> int | None:
    """Final step of a micro model trained before checkpoints were kept (data/models/micro.json)."""
    summary = model_dir.parent / "micro.json"
    try:
        models = read_json(summary, "micro-suite summary", MAX_SCHEDULE_BYTES, shape=_SUMMARY_SHAPE)["models"]
    except (OSError, ValueError, KeyError):
        return None
    for entry in models:
        if entry.get("name") == model_dir.name and "steps" in entry:
            return int(entry["steps"])
    return None


def directory_schedule(directory: str | Path, name: str | None = None) -> Schedule | None:
    """The schedule of a local model directory: its ``checkpoints/schedule.json``, else (micro models
    trained before checkpoints were kept) the final step recorded in ``micro.json`` beside it."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        return None
    schedule = local_schedule(directory, name)
    if schedule is not None:
        return schedule
    final = _trained_steps(directory)
    return micro_schedule([final], name=name or directory.name) if final is not None else None


def schedule_of(model: str) -> Schedule | None:
    """The checkpoint schedule of a registered model or a local model directory (None if unknown)."""
    row = lookup_model(model)
    if row is None:
        return directory_schedule(model)
    try:
        directory = source_location(str(row["source"]))
    except (OSError, ValueError):  # bundled data missing
        directory = None
    return member_schedule(str(row["family"]), directory, str(row["model"]))


def member_schedule(family: str, directory: str | None, name: str | None = None) -> Schedule | None:
    """The schedule of a model whose registry family ("" for none) and folder (None for a hub
    model or missing data) are already known: its family's, else its folder's; the registry is not read."""
    if family.lower() in FAMILY_SCHEDULES:
        return FAMILY_SCHEDULES[family.lower()]
    return directory_schedule(directory, name) if directory is not None else None


def training_position(model: str, revision: str | None, S: float | None = None) -> dict | None:
    """``{"step", "tokens_per_step", "D", "C"}`` of `model` at `revision` when its schedule is
    known (C only given S), else None. Recorded in cache manifests, never in cache keys."""
    return position(schedule_of(model), revision, S)


def position(schedule: Schedule | None, revision: str | None, S: float | None = None) -> dict | None:
    """`training_position` under a `schedule` already found (None: unknown, and so is the position)."""
    if schedule is None:
        return None
    try:
        step = schedule.step_of(revision)
    except UnknownRevisionError:
        return None
    position = {
        "step": step,
        "tokens_per_step": schedule.tokens_per_step,
        "D": step * schedule.tokens_per_step,
    }
    if S is not None:
        position["C"] = training_compute(float(S), position["D"])
    return position


def select_revisions(model: str, value: str | Sequence[str]) -> list[str]:
    """The revisions of `model` that `value` names: one name, a list of names, or ``"log:N"``.

    With a known schedule every name is checked (`UnknownRevisionError` lists the available ones)
    and ``log:N`` picks N log-spaced checkpoints; without one, names pass through unchecked (a hub
    branch, tag or commit) and ``log:N`` is an error, since there is nothing to space."""
    names = [value] if isinstance(value, str) else list(value)
    if not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise UnknownRevisionError(f"revisions must be non-empty names or 'log:N', got {value!r}")
    names = [n.strip() for n in names]
    schedule = schedule_of(model)
    if schedule is None:
        spacing = [n for n in names if LOG_SPACING.match(n)]
        if spacing:
            raise UnknownRevisionError(
                f"{spacing[0]!r} needs a checkpoint schedule, and none is known for {model}; "
                "name its revisions instead"
            )
        return list(dict.fromkeys(names))
    return list(dict.fromkeys(r for name in names for r in schedule.select(name)))


def log_checkpoint_steps(total_steps: int, n: int) -> list[int]:
    """`n` intermediate checkpoint steps, log-spaced (doubling-like) below `total_steps`, plus the
    final step: geometric from total/2^n to total. Used by scripts/train_micro.py."""
    if total_steps < 1 or n < 0:
        raise InvalidArgumentError(f"need total_steps >= 1 and n >= 0, got {total_steps}, {n}")
    first = max(1.0, total_steps / 2**n)
    steps = {max(1, round(first * (total_steps / first) ** (i / n))) for i in range(n)} if n else set()
    return sorted(s for s in steps if s < total_steps) + [total_steps]


PAPER_GPT2 = "paper_gpt2_wikipedia"


def _reference_path(name: str, suffix: str) -> Path:
    return data_dir() / "reference" / f"{name}{suffix}"


def paper_reference(name: str = PAPER_GPT2) -> pd.DataFrame:
    """The reference table: family, model, corpus, S, vocab_size, k, rbp, neg_log_rbp, ce,
    ties (the paper's convention), source ("paper"), source_path (the file in the repository)."""
    table = pd.read_csv(_reference_path(name, ".csv"))
    meta = paper_reference_meta(name)
    table.insert(table.columns.get_loc("rbp") + 1, "neg_log_rbp", -np.log(table["rbp"]))
    return table.assign(ties=meta["ties"], source="paper")


def paper_reference_meta(name: str = PAPER_GPT2) -> dict:
    """Where the reference table comes from: repository, commit, paths, fields, setup, licence."""
    return read_json(_reference_path(name, ".meta.json"), "reference metadata", 1 << 20, shape=dict)
