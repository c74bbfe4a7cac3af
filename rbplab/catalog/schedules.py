"""Checkpoint schedules: which revisions of a model exist and how far into training each one is.

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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rbplab.catalog import registry
from rbplab.core.compute import training_compute
from rbplab.core.documents import Fields, ListOf, read_json
from rbplab.core.errors import InvalidArgumentError, RbplabError

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
    row = registry.lookup_model(model)
    if row is None:
        return directory_schedule(model)
    try:
        directory = registry.source_location(str(row["source"]))
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
