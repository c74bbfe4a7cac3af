"""What a rule of the cache is and how rules judge a subject.

A rule (`Rule`) has a name, the kind of thing it checks (its scope: a class of subject, such as a
manifest as parsed or a summary's tables as read) and a check that yields what is wrong, one line
each, in the words `rbplab cache verify` prints. `judge` runs the rules of a subject's scope in
their order; a rule marked `final` stops its scope when broken, because the rules after it assume
it holds. The rows themselves are in `entry_rules`, `summary_rules` and `index_rules`; `rules`
holds them as one table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    name: str
    scope: type
    check: Callable[[Any], Iterator[str]]
    final: bool = False  # when broken, the scope's later rules are not checked (they assume it)


def judge(rules: Sequence[Rule], subject: Any, *, through: str | None = None) -> list[tuple[Rule, str]]:
    """(rule, problem) for each rule of `rules` in `subject`'s scope that it breaks, in order; a
    broken final rule ends the scope, and so does the rule named `through` (checking only that far)."""
    scope = [rule for rule in rules if rule.scope is type(subject)]
    if through is not None and through not in {rule.name for rule in scope}:
        raise ValueError(f"no rule {through!r} checks a {type(subject).__name__}")
    found: list[tuple[Rule, str]] = []
    for rule in scope:
        problems = [(rule, problem) for problem in rule.check(subject)]
        found += problems
        if (problems and rule.final) or rule.name == through:
            break
    return found
