"""Every option of every control of every offline explorer can be clicked, in reports of one, two
and four corpora.

Each report (the session's report fixtures: the micro-suite on prose, on prose and humaneval, and
on the four bundled corpora) is opened from disk in Debian's chromium with every non-file request
refused. On each page, every explorer's controls are clicked as a reader clicks them: every
choice of the second control (a menu opened from its header, or a slider's step), and in each
choice every step or option of the last control. Before each click the element under the pointer
must be that option (notebook 04's corpus menu opened past the figure's bottom edge, where the
next cell lay over 3 of its 4 options in the demo's report), and after it the figure must change.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers.explorer_clicks import EXPLORER_NOTEBOOKS, click_every_option

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
IS_EXPLORER = "el => !!((el.layout.sliders || []).length || (el.layout.updatemenus || []).length)"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.notebook,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (apt-get install chromium; make browser-deps)"
    ),
]

REPORTS = {
    "1 corpus": "micro_prose_report_template",
    "2 corpora": "micro_report_template",
    "4 corpora": "micro_wide_report_template",
}


def click_report(folder: Path) -> dict:
    """Open each page of the report in `folder` offline and click every option of every explorer:
    per page the explorers found and the clicks made, the problems seen, the console errors."""
    from playwright.sync_api import sync_playwright

    found: dict = {"pages": {}, "problems": [], "errors": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            context.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            for path in sorted(folder.glob("*.html")):
                page = context.new_page()
                page.on("pageerror", lambda e, name=path.name: found["errors"].append(f"{name}: {e}"))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                plots = page.locator(".js-plotly-plot")
                explorers = clicks = 0
                for i in range(plots.count()):
                    plot = plots.nth(i)
                    plot.wait_for(timeout=60_000)
                    if not plot.evaluate(IS_EXPLORER):
                        continue
                    explorers += 1
                    made, problems = click_every_option(page, plot, f"{path.name} explorer {i + 1}")
                    clicks += made
                    found["problems"] += problems
                found["pages"][path.stem] = (explorers, clicks)
                page.close()
        finally:
            browser.close()
    return found


@pytest.mark.parametrize("corpora", list(REPORTS))
def test_every_option_of_every_explorer_control_can_be_clicked(
    corpora: str, request: pytest.FixtureRequest
) -> None:
    folder = request.getfixturevalue(REPORTS[corpora])
    found = click_report(folder)
    with_explorers = {
        stem[:2] for stem, (explorers, _) in found["pages"].items() if re.match(r"\d\d_", stem) and explorers
    }
    assert with_explorers == set(EXPLORER_NOTEBOOKS), found["pages"]
    assert all(clicks >= explorers for explorers, clicks in found["pages"].values()), found["pages"]
    assert found["errors"] == [], "\n".join(found["errors"])
    problems = found["problems"]
    assert problems == [], "\n".join(problems[:40]) + f"\n({len(problems)} problems)"
