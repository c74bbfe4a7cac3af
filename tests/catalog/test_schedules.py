"""Checkpoint schedules: D and C for every revision without loading weights, log-spaced selection,
one-line errors listing what exists, and the micro-suite's on-disk schedule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rbplab.catalog import registry
from rbplab.catalog.registry import PYTHIA, UnknownRevisionError

ROOT = Path(__file__).resolve().parents[2]


def test_pythia_has_154_checkpoints_ending_at_step143000():
    revisions = PYTHIA.revisions()
    assert len(revisions) == 154
    assert revisions[:12] == [
        "step0", "step1", "step2", "step4", "step8", "step16", "step32", "step64", "step128", "step256",
        "step512", "step1000",
    ]  # fmt: skip
    assert revisions[-2:] == ["step142000", "step143000"]
    assert PYTHIA.step_of("main") == PYTHIA.step_of(None) == 143_000


def test_pythia_tokens_and_compute():
    assert PYTHIA.tokens("step1") == 2_097_152
    assert PYTHIA.tokens("step0") == 0
    assert PYTHIA.tokens("step143000") == 143_000 * 2_097_152 == 299_892_736_000  # the "300B tokens"
    S = 85_056_000  # pythia-160m non-embedding parameters (registry)
    assert PYTHIA.compute("step1000", S) == pytest.approx(6 * S * 1000 * 2_097_152)
    table = PYTHIA.table(S)
    assert list(table.columns) == ["revision", "step", "D", "C"]
    row = table.set_index("revision").loc["step64"]
    assert row["D"] == 64 * 2_097_152 and row["C"] == pytest.approx(6 * S * row["D"])


def test_registered_pythia_models_share_the_schedule():
    assert registry.schedule_of("pythia-160m") is PYTHIA
    assert registry.schedule_of("EleutherAI/pythia-1b") is PYTHIA
    position = registry.training_position("pythia-70m", "step2", S=18_915_328)
    assert position == {
        "step": 2,
        "tokens_per_step": 2_097_152,
        "D": 4_194_304,
        "C": 6 * 18_915_328 * 4_194_304,
    }
    assert registry.schedule_of("gpt2") is None and registry.training_position("gpt2", None) is None


def test_log_spacing_picks_existing_checkpoints():
    chosen = PYTHIA.select("log:8")
    assert len(chosen) == 8 and len(set(chosen)) == 8
    assert chosen[0] == "step1" and chosen[-1] == "step143000"
    steps = [PYTHIA.step_of(r) for r in chosen]
    assert steps == sorted(steps) and all(r in PYTHIA.revisions() for r in chosen)
    # roughly even in log(step): consecutive ratios within a factor ~3 of the ideal one
    ideal = (143_000) ** (1 / 7)
    ratios = [b / a for a, b in zip(steps[:-1], steps[1:], strict=True)]
    assert all(ideal / 3 < r < ideal * 3 for r in ratios)
    assert PYTHIA.select("log:1") == ["step143000"]
    assert len(PYTHIA.select("log:153")) == 153  # every checkpoint but step0


def test_unknown_revisions_and_bad_spacing_are_one_line_errors():
    with pytest.raises(UnknownRevisionError) as err:
        PYTHIA.select(["step1000", "step1500"])
    message = str(err.value)
    assert "\n" not in message and "'step1500'" in message and "step0" in message and "step143000" in message
    with pytest.raises(UnknownRevisionError, match="between 1 and 153"):
        PYTHIA.select("log:200")
    with pytest.raises(UnknownRevisionError):
        PYTHIA.select("log:0")


def test_micro_schedule_from_the_training_scripts_layout(tmp_path):
    model = tmp_path / "micro-9"
    registry.write_local_schedule(model, [1600, 100, 400, 25, 50], tokens_per_step=2048)
    schedule = registry.directory_schedule(model)
    assert schedule.revisions() == ["step-25", "step-50", "step-100", "step-400", "step-1600"]
    assert schedule.step_of("main") == 1600 and schedule.tokens("step-400") == 400 * 2048
    assert registry.schedule_of(str(model)).revisions() == schedule.revisions()
    assert registry.training_position(str(model), "step-50", S=1000)["C"] == 6 * 1000 * 50 * 2048
    with pytest.raises(UnknownRevisionError, match="step-25, step-50"):
        schedule.select(["step-1500"])


def test_committed_micro_models_know_their_checkpoints():
    schedule = registry.schedule_of("micro-1-25K")
    assert schedule is not None
    assert schedule.revisions() == ["step-98", "step-195", "step-390", "step-781", "step-1562"]
    assert schedule.tokens("main") == 1562 * 2048 and schedule.tokens("step-98") == 98 * 2048


def test_micro_tokens_per_step_is_the_training_scripts():
    tree = ast.parse((ROOT / "scripts" / "train_micro.py").read_text())
    values = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.targets[0], ast.Name)
    }
    assert values["SEQ"] * values["BATCH"] == registry.MICRO_TOKENS_PER_STEP


def test_log_checkpoint_steps_of_the_training_script():
    assert registry.log_checkpoint_steps(1562, 5) == [49, 98, 195, 390, 781, 1562]
    assert registry.log_checkpoint_steps(1600, 4) == [100, 200, 400, 800, 1600]
    steps = registry.log_checkpoint_steps(9, 4)  # few steps: distinct, below the final one
    assert steps == sorted(set(steps)) and steps[-1] == 9 and len(steps) >= 4
    assert registry.log_checkpoint_steps(3, 0) == [3]
