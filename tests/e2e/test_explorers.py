"""Every offline explorer of a report of one corpus and of two can be driven as a reader drives
it, and shows its data at every state it reaches (`helpers.explorer_clicks`: what is clicked and
what each click must show).

The reports are the session's (the micro-suite on prose, and on prose and humaneval), opened from
disk in chromium with every non-file request refused. A fixed sample of each control's options is
clicked: every option of a control of four or fewer, else its far end, middle, near end and opening
step. Every option of every control is clicked in the demo's report of four corpora
(test_explorers_every_option.py), whose corpus menus are the longest. Notebook 06 analyses the
checkpoints in the two-corpus report (and falls back to its known law in the four-corpus one), so
both of its explorers are seen.
"""

from __future__ import annotations

import pytest
from helpers.browser import needs_chromium
from helpers.explorer_clicks import check_report, explore_report

pytestmark = [pytest.mark.slow, pytest.mark.notebook, pytest.mark.browser, needs_chromium]

# Two corpora first: under xdist test_study_report builds the prose report on another worker meanwhile.
REPORTS = {"2 corpora": "micro_report_template", "1 corpus": "micro_prose_report_template"}


@pytest.mark.parametrize("corpora", list(REPORTS))
def test_a_sample_of_every_explorer_control_can_be_clicked_and_shows_its_data(
    corpora: str, request: pytest.FixtureRequest
) -> None:
    folder = request.getfixturevalue(REPORTS[corpora])
    check_report(explore_report(folder, every=False, name=corpora.replace(" ", "-")))
