"""Studies of training checkpoints: runs carry revision, step, D and C into every table."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.models import DOCUMENTS, build_checkpointed

from rbplab.analysis import data_scaling
from rbplab.core.runs import Run, as_runs
from rbplab.study import Study, load_study_file, synthetic_study

SUMMARY = ["family", "corpus", "model", "S", "n_tokens", "n_docs", "ce", "mean_p", "rbp_1"]
POINTS = ["family", "corpus", "model", "S", "k", "rbp", "neg_log_rbp", "n_tokens"]
TRAINING = ["revision", "step", "D", "C"]


@pytest.fixture(scope="module")
def checkpoint_study(tmp_path_factory, tiny_tokenizer) -> Study:
    root = tmp_path_factory.mktemp("ckpt-study")
    local = build_checkpointed(root / "micro-t", tiny_tokenizer)
    lines = [json.dumps({"id": i, "text": t}) for i, t in DOCUMENTS]
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n")
    (root / "study.toml").write_text(
        f'models = ["{local}"]\ncorpora = ["docs.jsonl"]\nrevisions = "log:2"\n'
        "[settings]\ncontext_length = 32\n"
    )
    return load_study_file(root / "study.toml", cache_dir=root / "cache")


def test_checkpoint_runs_carry_revision_steps_tokens_and_compute(checkpoint_study: Study) -> None:
    runs = sorted(checkpoint_study.runs, key=lambda r: r.step)
    assert [r.revision for r in runs] == ["step-10", "step-40"]
    assert [r.step for r in runs] == [10, 40]
    assert [r.D for r in runs] == [10 * 64.0, 40 * 64.0]  # tokens_per_step of build_checkpointed
    assert all(r.C == pytest.approx(6 * r.S * r.D) for r in runs)
    assert all(r.model.endswith(f"@{r.revision}") for r in runs)


def test_summary_and_points_gain_training_columns_only_for_checkpoints(checkpoint_study: Study) -> None:
    summary = checkpoint_study.summary()
    assert list(summary.columns) == SUMMARY[:4] + TRAINING + SUMMARY[4:]
    assert sorted(summary["D"]) == [640.0, 2560.0] and (summary["C"] == 6 * summary["S"] * summary["D"]).all()
    points = checkpoint_study.points([1, 5])
    assert list(points.columns) == POINTS[:4] + TRAINING + POINTS[4:]
    assert len(points) == 4 and set(points["revision"]) == {"step-10", "step-40"}
    # A study without checkpoints keeps its columns exactly.
    plain = synthetic_study(n_tokens=2000)
    assert not plain.has_training and checkpoint_study.has_training
    assert list(plain.summary().columns) == SUMMARY
    assert list(plain.points(1).columns) == POINTS
    assert plain.training_table(1).empty


def test_training_table_feeds_data_scaling(checkpoint_study: Study) -> None:
    table = checkpoint_study.training_table([1, 5])
    assert list(table.columns) == [
        "family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"
    ]  # fmt: skip
    assert len(table) == 4 and table["model"].nunique() == 1 and "@" not in table["model"].iloc[0]
    summary = checkpoint_study.summary().set_index("revision")
    for row in table.itertuples():  # CE is the run's, the same at every k
        assert row.ce == pytest.approx(summary.loc[row.revision, "ce"])
    fits = data_scaling.data_fits(table, y="neg_log_rbp")
    assert list(fits[["family", "corpus", "k"]].itertuples(index=False, name=None)) == [
        (table["family"].iloc[0], "docs", 1),
        (table["family"].iloc[0], "docs", 5),
    ]
    assert (fits["n"] == 2).all()


def test_runs_frames_pass_training_fields_through(checkpoint_study: Study) -> None:
    frame = pd.DataFrame(
        [
            {"family": r.family, "model": r.model, "corpus": r.corpus, "S": r.S, "stats": r.stats}
            | r.training
            for r in checkpoint_study.runs
        ]
    )
    again = as_runs(frame)
    assert [r.training for r in again] == [r.training for r in checkpoint_study.runs]
    bare = as_runs(frame.drop(columns=TRAINING))
    assert all(r.D is None and r.revision is None for r in bare)
    run = Run("f", "m", "c", 1.0, checkpoint_study.runs[0].stats)
    assert run.training == {"revision": None, "step": None, "D": None, "C": None}
    assert Study([run]).training_table(1).empty
