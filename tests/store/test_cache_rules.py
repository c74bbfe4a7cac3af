"""The cache's verification rules are one table (`rbplab.store.cache.rules.RULES`): what a read
checks is what the table lists, nothing else."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers.factories import complete_entry

from rbplab.store.cache import rules
from rbplab.store.cache.entry_rules import Record

N_TOKENS_RULE = "n_tokens is the sum of the shard rows"


def test_rule_names_are_unique_within_their_scope():
    counts = Counter((rule.scope, rule.name) for rule in rules.RULES)
    assert [key for key, n in counts.items() if n > 1] == []


def test_a_read_applies_exactly_the_rules_of_the_table(tmp_path, monkeypatch):
    entry = complete_entry(tmp_path)
    manifest = json.loads(entry.manifest_path.read_text())
    manifest["n_tokens"] = 21  # the two shards hold 10 + 10 rows
    assert entry.manifest_problems(manifest) == ["n_tokens 21 is not the sum of the shard rows (20)"]
    without = tuple(rule for rule in rules.RULES if rule.name != N_TOKENS_RULE)
    assert len(without) == len(rules.RULES) - 1
    monkeypatch.setattr(rules, "RULES", without)
    assert entry.manifest_problems(manifest) == []


def test_a_final_rule_stops_its_scope_and_through_names_a_rule_of_it():
    record = Record({"sha256": "x", "rows": -1, "bytes": 0}, spec={})
    # three rules are broken, but the first (no valid sha256) is final: later ones assume it holds
    assert rules.problems(record) == ["has no valid sha256"]
    assert rules.problems(Record({"sha256": "0" * 64, "rows": 3, "bytes": 9}, {})) == []
    with pytest.raises(ValueError, match="no rule 'shard has its recorded rows' checks a Record"):
        rules.problems(record, through="shard has its recorded rows")
