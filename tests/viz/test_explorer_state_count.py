"""An offline explorer counts its states as the product of its controls' values: in the note under
it, and when the last control is thinned to stay within `max_states`."""

from __future__ import annotations

from rbplab.viz.states import Control, note, thin


def _control(name: str, n: int) -> Control:
    return Control(name, tuple(range(n)), tuple(str(v) for v in range(n)))


def test_the_note_counts_every_combination():
    assert note([_control("corpus", 3), _control("k", 4)]).startswith(
        "Offline explorer, 12 precomputed states"
    )


def test_thinning_keeps_the_combinations_within_the_bound():
    controls = [_control("family", 2), _control("corpus", 3), _control("k", 20)]
    kept = thin(controls, {"k": 0}, max_states=30)
    # 2 x 3 combinations of the others leave 30 // 6 = 5 values of k (0 and 19 among them)
    assert [len(c.values) for c in kept] == [2, 3, 5]
    assert kept[-1].values[0] == 0 and kept[-1].values[-1] == 19 and kept[-1].reach == 20
