"""The cached checkpoints a report hands the training notebook."""

from __future__ import annotations

import pytest
from helpers.factories import one_token_entry

from rbplab.catalog import registry
from rbplab.catalog.registry import schedule_of
from rbplab.report.request import cached_checkpoints


def _members() -> list[str]:
    try:
        members = registry.family_models("micro")["model"].tolist()
    except registry.UnknownFamilyError:
        pytest.skip("no micro family in the registry")
    if any(schedule_of(m) is None for m in members):
        pytest.skip("the micro-suite's checkpoint schedules are not in data/")
    return members


def _entry(root, model, corpus, revision, step, max_tokens):
    spec = {
        "model": {"name": model, "revision": revision},
        "corpus": {"name": corpus},
        "max_tokens": max_tokens,
    }
    one_token_entry(root, spec, training={"step": step})


def test_cached_checkpoints_every_model_on_every_corpus(tmp_path):
    members = _members()
    final = {m: schedule_of(m).final_step for m in members}
    for model in members:
        for corpus in ("prose", "humaneval"):
            for revision, step in (("step-98", 98), ("step-195", 195)):
                if (model, corpus, revision) == (members[-1], "humaneval", "step-195"):
                    continue  # one checkpoint missing on one corpus: that revision is not complete
                _entry(tmp_path, model, corpus, revision, step, 100)
            _entry(tmp_path, model, corpus, None, final[model], 100)  # the final checkpoint
            _entry(tmp_path, model, corpus, None, final[model], None)  # the full-corpus final model
    table = cached_checkpoints(["micro"], ["prose", "humaneval"], tmp_path)
    last = schedule_of(members[0]).revision(final[members[0]])
    assert table == {
        "families": ["micro"],
        "corpora": ["prose", "humaneval"],
        "revisions": ["step-98", last],
        "settings": {"max_tokens": 100},
    }
    assert cached_checkpoints(["micro"], ["prose", "wikipedia"], tmp_path) is None  # wikipedia: none cached
