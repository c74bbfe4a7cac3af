"""Studies of training checkpoints: runs carry revision, step, D and C into every table."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.models import DOCUMENTS, build_checkpointed

from rbplab.analysis import data_scaling
from rbplab.core.runs import Run, as_runs
from rbplab.grid import Grid
from rbplab.study import Study, load_study, size, synthetic_study, training

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
    return load_study(Grid.read(root / "study.toml"), cache_dir=root / "cache", extract=True, outer="model")


def test_checkpoint_runs_carry_revision_steps_tokens_and_compute(checkpoint_study: Study) -> None:
    runs = sorted(checkpoint_study.runs, key=lambda r: r.step)
    assert [r.revision for r in runs] == ["step-10", "step-40"]
    assert [r.step for r in runs] == [10, 40]
    assert [r.D for r in runs] == [10 * 64.0, 40 * 64.0]  # tokens_per_step of build_checkpointed
    assert all(r.C == pytest.approx(6 * r.S * r.D) for r in runs)
    assert all(r.model.endswith(f"@{r.revision}") for r in runs)


def test_summary_and_points_gain_training_columns_only_for_checkpoints(checkpoint_study: Study) -> None:
    summary = checkpoint_study.run_table()
    assert list(summary.columns) == SUMMARY[:4] + TRAINING + SUMMARY[4:]
    assert sorted(summary["D"]) == [640.0, 2560.0] and (summary["C"] == 6 * summary["S"] * summary["D"]).all()
    points = checkpoint_study.points([1, 5])
    assert list(points.columns) == POINTS[:4] + TRAINING + POINTS[4:]
    assert len(points) == 4 and set(points["revision"]) == {"step-10", "step-40"}
    # A study without checkpoints keeps its columns exactly.
    plain = synthetic_study(n_tokens=2000)
    assert not plain.has_training and checkpoint_study.has_training
    assert list(plain.run_table().columns) == SUMMARY
    assert list(plain.points(1).columns) == POINTS
    assert training.table(plain, 1).empty


def test_training_table_feeds_data_scaling(checkpoint_study: Study) -> None:
    table = training.table(checkpoint_study, [1, 5])
    assert list(table.columns) == [
        "family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"
    ]  # fmt: skip
    assert len(table) == 4 and table["model"].nunique() == 1 and "@" not in table["model"].iloc[0]
    summary = checkpoint_study.run_table().set_index("revision")
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
    assert training.table(Study([run]), 1).empty


def _registered_checkpoints(root, tokenizer, monkeypatch):
    """A data folder whose registry has one family, "tiny", of one checkpointed model."""
    from rbplab.catalog.registry import nonembedding_params

    data = root / "data"
    model = build_checkpointed(data / "models" / "tiny-1", tokenizer)
    S = nonembedding_params(model)
    (data / "families.csv").write_text(
        "family,model,source,S,n_params,vocab_size,head_rows,max_context,tied,architecture\n"
        f"tiny,tiny-1,data/models/tiny-1,{S},{S},{len(tokenizer)},{len(tokenizer)},64,False,"
        "GPTNeoXForCausalLM\n"
    )
    (root / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCUMENTS))
    monkeypatch.setenv("RBPLAB_DATA", str(data))
    return root / "docs.jsonl"


def test_load_study_takes_revisions_as_a_study_file_does(tmp_path, monkeypatch, tiny_tokenizer) -> None:

    docs = _registered_checkpoints(tmp_path, tiny_tokenizer, monkeypatch)
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=r"no revision 'step-20'; available: step-10, step-40"):
        load_study(
            Grid.from_names("tiny", [str(docs)], revisions=["step-20"], context_length=32), cache_dir=cache
        )
    assert not cache.exists()  # checked before anything ran
    study = load_study(
        Grid.from_names("tiny", [str(docs)], revisions="log:2", context_length=32),
        cache_dir=cache,
        extract=True,
    )
    got = sorted((r.model, r.revision, r.step, r.D) for r in study.runs)
    assert got == [("tiny-1@step-10", "step-10", 10, 640.0), ("tiny-1@step-40", "step-40", 40, 2560.0)]
    (tmp_path / "study.toml").write_text(
        f'families = ["tiny"]\ncorpora = ["{docs}"]\nrevisions = "log:2"\n[settings]\ncontext_length = 32\n'
    )
    from_file = load_study(Grid.read(tmp_path / "study.toml"), cache_dir=cache, outer="model")
    for run in study.runs:  # the same cache entries, so the same ranks
        twin = next(r for r in from_file.runs if r.model == run.model)
        assert (twin.token_stats().n_greater == run.token_stats().n_greater).all() and twin.D == run.D


def test_size_law_is_fitted_per_training_step_never_across_steps() -> None:
    import numpy as np
    from helpers.factories import random_stats

    rng = np.random.default_rng(3)
    sizes, steps = (1e4, 1e5, 1e6), (100, 800)
    runs = [
        Run(
            "f",
            f"m{i}@step-{step}",
            "c",
            S,
            random_stats(rng),
            revision=f"step-{step}",
            step=step,
            D=step * 64.0,
        )
        for step in steps
        for i, S in enumerate(sizes)
    ]
    study = Study(runs)
    fits = size.fits(study, 1)
    assert sorted(fits["step"]) == list(steps) and (fits["n_models"] == 3).all()
    for step in steps:
        chosen = [r for r in runs if r.step == step]
        top1 = np.array(
            [np.mean(r.token_stats().n_greater + r.token_stats().n_equal <= 1) for r in chosen]
        )  # pessimistic
        slope = np.polyfit(np.log(sizes), np.log(-np.log(top1)), 1)[0]
        assert fits.loc[fits["step"] == step, "alpha"].item() == pytest.approx(-slope)
    assert set(size.bands(study, 1)["step"]) == set(steps)
    assert {r.step for r in study.at_step().runs} == {800}
    assert [r.model for r in study.at_step(100).runs] == ["m0@step-100", "m1@step-100", "m2@step-100"]
    with pytest.raises(ValueError, match=r"no run at step 5; this study has steps \[100, 800\]"):
        study.at_step(5)
    with pytest.raises(ValueError, match=r"the k-sweep compares model sizes at one training step.*100, 800"):
        size.ksweep(study, [1, 10])
    assert set(size.ksweep(study.at_step(), [1, 10])["k"]) == {1, 10}


def test_training_replicates_resample_the_same_documents_for_every_checkpoint(checkpoint_study) -> None:
    import numpy as np

    from rbplab.analysis.metrics import bootstrap_weights

    reps = training.replicates(checkpoint_study, "docs", [1, 5], n_rep=7, seed=3)
    table = training.table(checkpoint_study, [1, 5])
    runs = {r.revision: r for r in checkpoint_study.runs}
    order = list(table.loc[table["k"] == 1, "revision"])
    n_docs = max(r.stats.n_docs for r in runs.values())
    weights = bootstrap_weights(n_docs, 7, seed=3)  # replicate b counts each document's draws
    for column, revision in enumerate(order):
        stats = runs[revision].token_stats()
        w = weights[:, stats.doc]  # per token: its document's weight
        rank = stats.n_greater + stats.n_equal  # pessimistic
        for k in (1, 5):
            expected = -np.log((w * (rank <= k)).sum(1) / w.sum(1))
            assert reps[k][:, column] == pytest.approx(expected)
        assert reps["ce"][:, column] == pytest.approx((w * stats.nll).sum(1) / w.sum(1))
    with pytest.raises(ValueError, match="no checkpoint with a known D on corpus 'nope'"):
        training.replicates(checkpoint_study, "nope", 1)
