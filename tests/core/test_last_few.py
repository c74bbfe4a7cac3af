"""`rbplab.core.stats.LastFew`: what a study keeps of the runs it read last (a summary's
per-document tables, an indexed run's whole summary), at its limit, one under and one over."""

from __future__ import annotations

import gc

from rbplab.core.stats import LastFew


class Owner:
    pass


def held(owners: list[Owner]) -> list[bool]:
    return ["value" in owner.__dict__ for owner in owners]


def test_the_last_few_keep_their_values_and_older_ones_drop_theirs():
    recent = LastFew(3, "value")
    owners = [Owner() for _ in range(4)]
    for owner in owners[:3]:  # at the limit: every value kept
        recent.keep(owner, 1)
    assert held(owners) == [True, True, True, False]
    recent.keep(owners[3], 1)  # one over: the oldest drops its value
    assert held(owners) == [False, True, True, True]


def test_an_owner_kept_again_stays_however_old_its_first_keep():
    recent = LastFew(2, "value")
    a, b, c = Owner(), Owner(), Owner()
    recent.keep(a, 1)
    recent.keep(b, 1)
    recent.keep(a, 2)  # a again: b is now the oldest
    recent.keep(c, 1)
    assert held([a, b, c]) == [True, False, True] and a.value == 2


def test_an_owner_gone_since_is_forgotten():
    recent = LastFew(2, "value")
    recent.keep(Owner(), 1)
    gc.collect()
    later = [Owner(), Owner()]
    for owner in later:
        recent.keep(owner, 1)
    assert held(later) == [True, True]
