"""Every rule an entry is checked by, as the rows of one table (`RULES`).

A rule has a name, the kind of thing it checks (its scope: a spec file, a checksum record, a
manifest, a shard's bytes, a shard file as listed, a summary file, a summary's pooled tables and its
per-document tables, a summary against the one its shards give) and a check that yields what is
wrong, one line each, in the words `rbplab cache verify` prints. Verification is
`problems(subject)`: the rules of the subject's scope in table order; a rule marked `final` stops
its scope when broken, because the rules after it assume it holds. Reading files is the entry's
job (`rbplab.store.cache.reading`), parsing the summary's parquet is
`rbplab.store.cache.summary_file`'s; the rules only judge what was read.

The rows are kept beside the subjects they check: `rbplab.store.cache.entry_rules` (spec.json,
checksum records, the manifest, the shards) and `rbplab.store.cache.summary_rules` (the summary's
file and tables); `RULES` is the two in that order. What a rule is, and how a list of rules judges
a subject, is `rbplab.store.cache.rule`.
"""

from __future__ import annotations

from typing import Any

from rbplab.store.cache.entry_rules import ENTRY_RULES, Record
from rbplab.store.cache.rule import Rule, judge
from rbplab.store.cache.summary_rules import SUMMARY_RULES

# The entry's files first, then its summary (the order rules are listed, checked and reported in).
RULES: tuple[Rule, ...] = ENTRY_RULES + SUMMARY_RULES


def broken(subject: Any, *, through: str | None = None) -> list[tuple[Rule, str]]:
    """(rule, problem) for each rule of `subject`'s scope it breaks, in table order; a broken final
    rule ends the scope, and so does the rule named `through` (checking only that far)."""
    return judge(RULES, subject, through=through)


def problems(subject: Any, *, through: str | None = None) -> list[str]:
    """Every problem of `subject` (`broken` without the rules)."""
    return [problem for _, problem in broken(subject, through=through)]


def first_problem(subject: Any, *, through: str | None = None) -> str | None:
    """The first problem of `subject`, None when its rules hold."""
    found = broken(subject, through=through)
    return found[0][1] if found else None


def record_problem(record: Any, spec: Any) -> str | None:
    """What is wrong with a shard's checksum record under `spec`, or None."""
    return first_problem(Record(record, spec))
