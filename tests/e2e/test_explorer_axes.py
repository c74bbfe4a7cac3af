"""Every offline explorer of a report shows its data at every state a reader picks.

A report of the micro-suite on two corpora and on the four bundled ones (as `make demo` writes),
opened from disk in Debian's chromium with every non-file request refused: on each page, each
explorer's controls (the corpus or N dropdown or slider, the k slider) are moved to at least
three positions as a reader clicks them, and after each move every point of every visible trace
lies inside its axes' drawn range (log axes in decades) and every y axis with data has labelled
ticks. No page logs a console error. (The explorer's frames once carried the new state's ticks
but not its range, and `Plotly.animate` does not autorange: at every k but the opening one the
markers and the fit lay outside the axis.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.explorer_clicks import EXPLORER_NOTEBOOKS
from helpers.plotly_axes import OUTSIDE

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "browser"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.notebook,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (apt-get install chromium; make browser-deps)"
    ),
]


@pytest.fixture(scope="module", params=[2, 4], ids=["2 corpora", "4 corpora"])
def report(request: pytest.FixtureRequest) -> Path:
    """A report of the micro-suite's final models on every bundled corpus and 3 checkpoints per
    size on two of them, scored on a few hundred tokens (what `make demo` scores, smaller): the
    session's `micro_report_template` on two corpora (every notebook), `micro_wide_report_template`
    on four (the notebooks that show a view). Notebook 06 analyses the checkpoints in the
    two-corpus report and falls back to its known law in the four-corpus one, so both of its
    explorers are seen."""
    name = "micro_report_template" if request.param == 2 else "micro_wide_report_template"
    return request.getfixturevalue(name)


# Counts redraws, so a move is checked once the figure shows it.
WATCH = "el => { el.__redraws = 0; el.on('plotly_afterplot', () => { el.__redraws += 1; }); }"
SETTLED = "([el, n]) => el.__redraws > n && !(el._transitionData && el._transitionData._frameQueue.length)"


def _positions(n: int, opening: int) -> list[int]:
    """Where a control of n positions opened at `opening` is moved: the far end, the middle, the
    near end and back (three or more positions in all; every one when there are fewer), each
    unlike the one before."""
    out: list[int] = []
    for p in [n - 1, n // 2, 0, opening] if n > 2 else range(n):
        if p != (out[-1] if out else opening):
            out.append(p)
    return out


def _settle(page, plot, before: int) -> None:
    page.wait_for_function(SETTLED, arg=[plot.element_handle(), before], timeout=15_000)
    page.wait_for_timeout(50)  # the ticks are drawn in the frame after the redraw


# Where to click on slider `index` (of layout.sliders) to pick its step `step`: the step's tick on
# the rail. A slider is found by its index, as plotly draws only the visible ones (in no set order).
STEP_AT = """(el, [index, step]) => {
    const group = Array.from(el.querySelectorAll('g.slider-group')).find(g => g.__data__._index === index);
    const tick = group.querySelectorAll('rect.slider-tick-rect')[step].getBoundingClientRect();
    const rail = group.querySelector('rect.slider-rail-touch-rect').getBoundingClientRect();
    return [tick.x + tick.width / 2, rail.y + rail.height / 2];
}"""


def _move_slider(page, plot, index: int, step: int) -> None:
    """Click slider `index` (of the figure's layout.sliders) where its `step`-th step lies."""
    x, y = plot.evaluate(STEP_AT, [index, step])
    before = plot.evaluate("el => el.__redraws")
    page.mouse.click(x, y)
    _settle(page, plot, before)


def _choose(page, plot, option: int) -> None:
    before = plot.evaluate("el => el.__redraws")
    plot.locator(".updatemenu-header-group").first.click()
    plot.locator(".updatemenu-dropdown-button").nth(option).click()
    _settle(page, plot, before)


# A menu that is the only control: its button `i` run as plotly runs a clicked button (its method
# with its args), since where a dropdown's buttons land varies with the room plotly finds for them.
PRESS = """(el, i) => {
    const button = el.layout.updatemenus[0].buttons[i];
    Plotly[button.method](el, ...button.args);
}"""


def _press(page, plot, option: int) -> None:
    before = plot.evaluate("el => el.__redraws")
    plot.evaluate(PRESS, option)
    _settle(page, plot, before)


def _explore(page, plot, where: str) -> list[str]:
    """Every state the explorer `plot` reaches along the moves, checked: the problems seen."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    plot.scroll_into_view_if_needed()
    plot.evaluate(WATCH)
    problems: list[str] = []

    def check(what: str) -> None:
        state = plot.evaluate(OUTSIDE)
        problems.extend(f"{where}, {what} ({state['title']}): {p}" for p in state["problems"])

    layout = plot.evaluate(
        "el => ({menus: (el.layout.updatemenus || []).map(m => m.buttons.length),"
        " sliders: (el.layout.sliders || []).map(s => [s.steps.length, s.visible !== false])})"
    )
    check("as it opens")
    menus, sliders = layout["menus"], layout["sliders"]
    if not sliders:
        # One control, a menu of a few named choices (04's corpus): each choice is a state.
        assert len(menus) == 1, f"{where}: {len(menus)} menus and no slider"
        opening = int(plot.evaluate("el => el._fullLayout.updatemenus[0].active || 0"))
        for choice in _positions(menus[0], opening):
            try:
                _press(page, plot, choice)
            except PlaywrightTimeout:
                problems.append(f"{where}, choice {choice + 1} of {menus[0]}: the figure did not redraw")
                continue
            check(f"choice {choice + 1} of {menus[0]}")
        return problems
    # The last control's slider, one copy per choice of the second control (only the chosen one
    # drawn); the second control is a dropdown, or a slider listed after the copies.
    second_is_slider = not menus and len(sliders) > 1
    copies = sliders[:-1] if second_is_slider else sliders
    choices = menus[0] if menus else (sliders[-1][0] if second_is_slider else 1)
    opening = next(i for i, (_, visible) in enumerate(copies) if visible)
    for i, choice in enumerate([opening, *_positions(choices, opening)]):
        if i:  # the opening choice is drawn already
            try:
                if menus:
                    _choose(page, plot, choice)
                else:
                    _move_slider(page, plot, len(sliders) - 1, choice)
            except PlaywrightTimeout:
                problems.append(f"{where}, choice {choice + 1} of {choices}: the figure did not redraw")
                continue
            check(f"choice {choice + 1} of {choices}")
        n = copies[choice][0]
        active = int(plot.evaluate(f"el => el._fullLayout.sliders[{choice}].active || 0"))
        for step in _positions(n, active):
            what = f"choice {choice + 1} of {choices}, step {step + 1} of {n}"
            try:
                _move_slider(page, plot, choice, step)
            except PlaywrightTimeout:
                problems.append(f"{where}, {what}: the figure did not redraw (active {active})")
                continue
            check(what)
    return problems


IS_EXPLORER = "el => !!((el.layout.sliders || []).length || (el.layout.updatemenus || []).length)"
TYPESET = "!window.MathJax || !MathJax.Hub || (MathJax.Hub.queue.pending === 0 && MathJax.isReady)"


def explore_report(folder: Path, shots: Path | None = None) -> dict[str, list[str] | int]:
    """Open every page of the report in `folder` offline and move every explorer's controls:
    the explorers found, the problems seen, the console errors and the remote URLs asked for."""
    from playwright.sync_api import sync_playwright

    found = {"explorers": 0, "problems": [], "errors": [], "remote": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})

            def route(r) -> None:
                if r.request.url.startswith("file:"):
                    r.continue_()
                else:
                    found["remote"].append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            for path in sorted(folder.glob("*.html")):
                page = context.new_page()

                def console(message, name: str = path.name) -> None:
                    if message.type == "error":
                        found["errors"].append(f"{name}: {message.text}")

                page.on("console", console)
                page.on("pageerror", lambda e, name=path.name: found["errors"].append(f"{name}: {e}"))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                plots = page.locator(".js-plotly-plot")
                for i in range(plots.count()):
                    plot = plots.nth(i)
                    plot.wait_for(timeout=60_000)
                    if plot.evaluate(IS_EXPLORER):
                        found["explorers"] += 1
                        found["problems"] += _explore(page, plot, f"{path.name} explorer {i + 1}")
                if shots is not None:
                    page.screenshot(path=str(shots / f"{folder.name}-{path.stem}.png"), full_page=True)
                # MathJax typesets after the page loads, and its font requests fail (if they do) then.
                page.wait_for_function(TYPESET, timeout=60_000)
                page.wait_for_timeout(500)
                page.close()
        finally:
            browser.close()
    return found


def test_every_explorer_state_shows_its_data_inside_its_axes(report: Path) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    found = explore_report(report, SHOTS)
    assert found["explorers"] >= len(EXPLORER_NOTEBOOKS), found["explorers"]
    assert found["remote"] == [], found["remote"]
    assert found["errors"] == [], "\n".join(found["errors"])
    problems = found["problems"]
    assert problems == [], "\n".join(problems[:40]) + f"\n({len(problems)} problems)"
