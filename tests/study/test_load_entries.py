"""`load_study(entries=...)` of a cache holding checkpoints: runs labelled model@revision as `load_study(...,
revisions=...)` labels them, and entries that would be one run refused with what tells them apart
and a selection that works."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.models import DOCUMENTS, build_checkpointed

import rbplab
from rbplab.core.errors import InvalidArgumentError
from rbplab.grid import Grid
from rbplab.store.cache.admin import list_entries
from rbplab.study import load_study, training

CAP = 40  # tokens: fewer than the documents hold, so the capped final model is another entry


@pytest.fixture(scope="module")
def cache(tmp_path_factory, tiny_tokenizer):
    """A registered model "tiny-1" (family "tiny") with checkpoints step-10 and the final step-40,
    scored on one corpus at both revisions, and its final weights once more with a token cap."""
    from rbplab.catalog.registry import nonembedding_params

    root = tmp_path_factory.mktemp("entries")
    data = root / "data"
    S = nonembedding_params(build_checkpointed(data / "models" / "tiny-1", tiny_tokenizer))
    (data / "families.csv").write_text(
        "family,model,source,S,n_params,vocab_size,head_rows,max_context,tied,architecture\n"
        f"tiny,tiny-1,data/models/tiny-1,{S},{S},{len(tiny_tokenizer)},{len(tiny_tokenizer)},64,False,"
        "GPTNeoXForCausalLM\n"
    )
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCUMENTS))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RBPLAB_DATA", str(data))
        checkpoints = load_study(
            Grid.from_names("tiny", [str(docs)], revisions="log:2", context_length=32),
            cache_dir=root / "cache",
            extract=True,
        )
        load_study(
            Grid.from_names("tiny", [str(docs)], context_length=32, max_tokens=CAP),
            cache_dir=root / "cache",
            extract=True,
        )
    return root / "cache", data, checkpoints


@pytest.fixture
def in_cache(cache, monkeypatch):
    root, data, checkpoints = cache
    monkeypatch.setenv("RBPLAB_DATA", str(data))
    monkeypatch.setenv("RBPLAB_CACHE", str(root))
    return list_entries(root), checkpoints


def test_checkpoints_by_key_are_labelled_as_load_study_labels_them(in_cache):
    entries, checkpoints = in_cache
    uncapped = entries[entries["max_tokens"].isna()]
    assert len(uncapped) == 2
    study = load_study(entries=uncapped["key"])
    got = sorted((r.model, r.corpus, r.revision, r.step, r.D, r.C, r.n_tokens) for r in study.runs)
    expected = sorted((r.model, r.corpus, r.revision, r.step, r.D, r.C, r.n_tokens) for r in checkpoints.runs)
    # tiny-1@step-40 is the final model's own entry (keyed without a revision): named as its schedule does
    assert [g[0] for g in got] == ["tiny-1@step-10", "tiny-1@step-40"]
    assert got == expected and {r.family for r in study.runs} == {"custom"}
    assert training.table(study, 1)["step"].tolist() == [10, 40]


def test_final_weights_alone_are_the_model(in_cache):
    entries, _ = in_cache
    study = load_study(entries=entries[entries["max_tokens"].eq(CAP)]["key"])
    assert [r.model for r in study.runs] == ["tiny-1"] and not study.has_training


def test_one_run_in_two_entries_names_them_and_how_to_select(in_cache):
    entries, _ = in_cache
    with pytest.raises(InvalidArgumentError) as caught:
        load_study(entries=entries["key"])
    message = str(caught.value)
    final = entries[entries["step"].eq(40)]
    assert "\n" not in message and message.startswith("1 run(s) appear in more than one entry")
    assert "tiny-1@step-40 on docs" in message
    for key, cap in zip(final["key"], final["max_tokens"], strict=True):
        assert f"{key[:8]} max_tokens={'None' if pd.isna(cap) else int(cap)}" in message
    advice = message.split("e.g. ", 1)[1]  # the selection it suggests runs as written
    scope: dict = {"rbplab": rbplab}
    exec(
        advice.replace("; ", "\n").replace(
            "rbplab.load_study(entries=", "study = rbplab.load_study(entries=", 1
        ),
        scope,
    )
    assert sorted(r.model for r in scope["study"].runs) == ["tiny-1@step-10", "tiny-1@step-40"]


def test_a_grid_and_its_entries_open_one_way_to_the_same_tables(in_cache):
    """`load_study(grid)` and `load_study(entries=...)` of the same entries take one path: every run
    is the entry's index row (the summary unread), and every table is the same, number for number;
    only the family differs (a key alone says "custom")."""
    from rbplab.store.cache.index import IndexedSummary
    from rbplab.store.files import cache_root

    entries, _ = in_cache
    docs = cache_root().parent / "docs.jsonl"
    by_grid = load_study(Grid.from_names("tiny", [str(docs)], revisions="log:2", context_length=32))
    by_keys = load_study(entries=entries[entries["max_tokens"].isna()]["key"])
    for study in (by_grid, by_keys):
        assert all(isinstance(r.stats, IndexedSummary) for r in study.runs)
    assert [r.family for r in by_grid.runs] == ["tiny", "tiny"]
    assert [r.family for r in by_keys.runs] == ["custom", "custom"]
    row = by_keys.runs[0].stats.row
    off_grid = next(k for k in range(1, row.vocab_size) if k not in set(row.ks.tolist()))
    ks = [1, off_grid, row.vocab_size]  # on the index row's k grid, off it (from the rank pairs), |V|

    def numbers(table: pd.DataFrame) -> pd.DataFrame:
        ordered = table.drop(columns="family").sort_values(["model", *(["k"] if "k" in table else [])])
        return ordered.reset_index(drop=True)

    for made in (lambda s: s.points(ks), lambda s: s.run_table(), lambda s: training.table(s, ks[:2])):
        pd.testing.assert_frame_equal(numbers(made(by_grid)), numbers(made(by_keys)))
