"""Every option of every control of every offline explorer of the demo's report (the micro-suite on
the four bundled corpora, as `make demo` writes it) can be clicked, and each state it reaches shows
its data inside its axes (`helpers.explorer_clicks`: what is clicked and what each click must show).

The report is the session's `micro_wide_report_template`, opened from disk in chromium with every
non-file request refused: every choice of each explorer's second control, and in each choice every
step or option of the last. This report's corpus menus are the longest (notebook 04's once opened
past the figure's bottom edge, where the next cell lay over 3 of its 4 options). The reports of one
and two corpora are clicked through a sample of each control (test_explorers.py).
"""

from __future__ import annotations

import pytest
from helpers.browser import needs_chromium
from helpers.explorer_clicks import check_report, explore_report

pytestmark = [pytest.mark.slow, pytest.mark.notebook, pytest.mark.browser, needs_chromium]


def test_every_option_of_every_explorer_control_can_be_clicked_and_shows_its_data(
    micro_wide_report_template,
) -> None:
    check_report(explore_report(micro_wide_report_template, every=True, name="4-corpora"))
