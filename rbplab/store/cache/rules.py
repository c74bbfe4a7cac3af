"""The rules a cache entry is checked by, as the rows of one table (`RULES`), in the order they
are listed, checked and reported in: the entry's files (`entry_rules.ENTRY_RULES`), its summary
(`summary_rules.SUMMARY_RULES`), its index row (`index_rules.INDEX_RULES`). Verification is
`problems(subject)`: the rules of the subject's scope in table order (`rule.judge`).
"""

from __future__ import annotations

from typing import Any

from rbplab.store.cache.entry_rules import ENTRY_RULES
from rbplab.store.cache.index_rules import INDEX_RULES
from rbplab.store.cache.rule import Rule, judge
from rbplab.store.cache.summary_rules import SUMMARY_RULES

RULES: tuple[Rule, ...] = ENTRY_RULES + SUMMARY_RULES + INDEX_RULES


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
