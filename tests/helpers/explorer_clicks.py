"""Click the options of every control of an offline explorer as a reader does (the browser tests).

An explorer (rbplab.viz.states) is a plotly figure with a last control (a slider, or a dropdown
of named choices) in one copy per choice of the control before it (a dropdown or a slider), only
the chosen copy drawn. `click_options` picks choices of the second control by clicking them,
and in each copy clicks steps or options of the last: every one, or a fixed sample (`sample`).
Before each click it asks the page which element lies under the pointer (an option that lies
under the next cell of the page cannot be clicked); after it, whether the figure changed and
whether every point it draws lies inside its axes, each y axis with data labelled
(`helpers.plotly_axes.OUTSIDE`).
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers.browser import chromium, offline_context, record_errors
from helpers.plotly_axes import OUTSIDE

EXPLORER_NOTEBOOKS = ("01", "02", "03", "04", "06")  # the notebooks whose pages show explorers
SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "browser"
IS_EXPLORER = "el => !!((el.layout.sliders || []).length || (el.layout.updatemenus || []).length)"
TYPESET = "!window.MathJax || !MathJax.Hub || (MathJax.Hub.queue.pending === 0 && MathJax.isReady)"

# A digest of what the figure draws: its traces and its layout (shapes, annotations, axes, title),
# less the controls themselves (a click moves their active option whatever it draws).
DIGEST = """el => {
    const layout = Object.fromEntries(Object.entries(el.layout)
        .filter(([k]) => k !== 'sliders' && k !== 'updatemenus'));
    const text = JSON.stringify([el.data, layout], (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v);
    let h = 0;
    for (let i = 0; i < text.length; i++) h = (Math.imul(31, h) + text.charCodeAt(i)) | 0;
    return `${text.length}:${h}`;
}"""

# The controls drawn now: [kind, index in layout, number of options, active, switches] per
# visible one; `switches`: it is the second control, whose options switch copies of the last
# (their method is "update"; the last control's steps "animate" to frames).
CONTROLS = """el => [
    ...(el._fullLayout.updatemenus || []).filter(m => m.visible)
        .map(m => ['menu', m._index, m.buttons.length, m.active, m.buttons[0].method === 'update']),
    ...(el._fullLayout.sliders || []).filter(s => s.visible)
        .map(s => ['slider', s._index, s.steps.length, s.active, s.steps[0].method === 'update']),
]"""

# Counts redraws, so a click is checked once the figure shows it.
WATCH = "el => { el.__redraws = 0; el.on('plotly_afterplot', () => { el.__redraws += 1; }); }"
SETTLED = (
    "([el, n]) => el.__redraws > n && !(el._transitionData && (el._transitionData._frameQueue || []).length)"
)

# Where to click for `option` of a control, in one call: [x, y, inside, what lies there, redraws].
# `what` is "step" (slider `index`'s step: its tick on the rail), "header" (menu `index`'s
# header) or "option" (the opened menu's option). The page is scrolled first when the point lies
# out of view. `inside`: the element under the point lies in the target (the slider's group, the
# menu's header group, the option). Null when the target is not drawn (a menu that did not open).
AIM = """(el, [what, index, option]) => {
    const place = () => {
        let target, r, y;
        if (what === 'step') {
            target = Array.from(el.querySelectorAll('g.slider-group')).find(g => g.__data__._index === index);
            r = target.querySelectorAll('rect.slider-tick-rect')[option].getBoundingClientRect();
            const rail = target.querySelector('rect.slider-rail-touch-rect').getBoundingClientRect();
            y = rail.y + rail.height / 2;
        } else if (what === 'header') {
            target = Array.from(el.querySelectorAll('g.updatemenu-header-group'))
                .find(h => h.__data__._index === index);
            r = target.querySelector('g.updatemenu-header').getBoundingClientRect();
        } else {
            target = el.querySelectorAll(
                'g.updatemenu-dropdown-button-group g.updatemenu-dropdown-button')[option];
            if (!target) return null;
            r = target.getBoundingClientRect();
        }
        return [target, r.x + r.width / 2, y === undefined ? r.y + r.height / 2 : y];
    };
    let found = place();
    if (!found) return null;
    if (found[2] < 10 || found[2] > window.innerHeight - 10) {
        window.scrollBy(0, found[2] - window.innerHeight / 2);
        found = place();
    }
    const [target, x, y] = found;
    const hit = document.elementFromPoint(x, y);
    const name = hit ? `${hit.tagName.toLowerCase()}.${hit.getAttribute('class') || ''}`
        + ` "${(hit.textContent || '').trim().slice(0, 40)}"` : 'nothing';
    return [x, y, !!(hit && target.contains(hit)), name, el.__redraws];
}"""
UNDER = f"([el, args]) => ({AIM})(el, args)[2]"

# What a click left, read once the frame after its redraw is drawn (the ticks land then): a
# digest of the figure, its data outside its axes (`OUTSIDE`), and the controls drawn.
STATE = f"""async el => {{
    await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    return [({DIGEST})(el), ({OUTSIDE})(el), ({CONTROLS})(el)];
}}"""


class _Explorer:
    """One explorer on its page: clicks its controls' options and records what each shows."""

    def __init__(self, page, plot, where: str) -> None:
        self.page, self.plot, self.where = page, plot, where
        plot.scroll_into_view_if_needed()
        plot.evaluate(WATCH)
        self.handle = plot.element_handle()
        self.problems: list[str] = []
        self.digest, outside, self.controls = plot.evaluate(STATE)
        self._check(outside, f"{where}, as it opens")

    def _check(self, outside: dict, what: str) -> None:
        self.problems.extend(f"{what} ({outside['title']}): {p}" for p in outside["problems"])

    def _aim(self, args: list, what: str) -> list | None:
        """Where to click for `args` (AIM), once the target lies under the pointer; None with a
        problem when the target is not drawn, or when something else lies there a second later:
        a menu that closes is removed over a few frames, so its option may lie there briefly."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        aim = self.plot.evaluate(AIM, args)
        if aim is None:
            self.problems.append(f"{what}: the menu did not open")
            return None
        if aim[2]:
            return aim
        try:
            self.page.wait_for_function(UNDER, arg=[self.handle, args], timeout=1_000)
        except PlaywrightTimeout:
            target = "the menu's header" if args[0] == "header" else "the option"
            self.problems.append(f"{what}: under the pointer lies {aim[3]}, not {target}")
            self.page.mouse.click(5, 5)  # close an opened menu
            return None
        return self.plot.evaluate(AIM, args)

    def click(self, kind: str, index: int, option: int, n: int) -> bool:
        """Click option `option` of the menu or slider `index` (of layout.updatemenus or .sliders)
        and check what the figure shows then: False when the click could not be made."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        what = f"{self.where}, {kind} {index + 1} option {option + 1} of {n}"
        if kind == "menu":
            header = self._aim(["header", index, 0], what)
            if header is None:
                return False
            self.page.mouse.click(*header[:2])
            self.page.wait_for_timeout(50)  # the menu opens
        aim = self._aim(["option" if kind == "menu" else "step", index, option], what)
        if aim is None:
            return False
        self.page.mouse.click(*aim[:2])
        try:
            self.page.wait_for_function(SETTLED, arg=[self.handle, aim[4]], timeout=15_000)
        except PlaywrightTimeout:
            self.problems.append(f"{what}: the figure did not redraw")
            self.digest = self.plot.evaluate(DIGEST)
            return False
        digest, outside, self.controls = self.plot.evaluate(STATE)
        if n > 1 and digest == self.digest:
            self.problems.append(f"{what}: the figure did not change")
        self.digest = digest
        self._check(outside, what)
        return True


def _order(n: int, active: int) -> list[int]:
    """Every option, the active one last (clicked while another is shown, so the figure changes)."""
    return [i for i in range(n) if i != active] + ([active] if 0 <= active < n else [])


def sample(n: int, active: int) -> list[int]:
    """A fixed sample of a control's n options opened at `active`: every one when n <= 4, else
    the far end, the middle, the near end and back to `active`, each unlike the one before."""
    if n <= 4:
        return _order(n, active)
    out: list[int] = []
    for option in (n - 1, n // 2, 0, active):
        if option != (out[-1] if out else active):
            out.append(option)
    return out


def click_options(page, plot, where: str, every: bool = True) -> tuple[int, list[str]]:
    """Click every option of every control of the explorer `plot` (or, `every=False`, a `sample`
    of each): (clicks made, problems seen). A problem: an option not under the pointer, a click
    whose figure does not change, a state that draws data outside its axes or an unlabelled y
    axis (checked as the explorer opens too)."""
    pick = _order if every else sample
    explorer = _Explorer(page, plot, where)
    clicks = 0
    second = next((c for c in explorer.controls if c[4]), None)
    for choice in pick(second[2], second[3]) if second else [None]:
        if second is not None:
            kind, index, n, _, _ = second
            if not explorer.click(kind, index, choice, n):
                continue
            clicks += 1
        last = [c for c in explorer.controls if not c[4]]
        if len(last) != 1:
            explorer.problems.append(f"{where}: {len(last)} copies of the last control drawn, not 1")
            continue
        kind, index, n, active, _ = last[0]
        clicks += sum(explorer.click(kind, index, option, n) for option in pick(n, active))
    return clicks, explorer.problems


def explore_report(folder: Path, every: bool, name: str) -> dict:
    """Open each page of the report in `folder` offline (every non-file request refused) and
    `click_options` of every explorer (`every` option, or a sample): per page the explorers found
    and the clicks made, the problems seen, the console errors and the remote URLs asked for. A
    screenshot of each page lands in test-output/browser/, named after `name`."""
    found: dict = {"pages": {}, "problems": [], "errors": [], "remote": []}
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        context = offline_context(browser, {"width": 1280, "height": 1000}, found["remote"])
        for path in sorted(folder.glob("*.html")):
            page = context.new_page()
            record_errors(page, found["errors"], path.name)
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
                made, problems = click_options(page, plot, f"{path.name} explorer {i + 1}", every)
                clicks += made
                found["problems"] += problems
            found["pages"][path.stem] = (explorers, clicks)
            page.screenshot(path=str(SHOTS / f"{name}-{path.stem}.png"), full_page=True)
            # MathJax typesets after the page loads, and its font requests fail (if they do) then.
            page.wait_for_function(TYPESET, timeout=60_000)
            page.wait_for_timeout(500)
            page.close()
    return found


def check_report(found: dict) -> None:
    """What `explore_report` found, as a test asserts it: every notebook of `EXPLORER_NOTEBOOKS`
    shows explorers and no other numbered page does, each page's explorers were clicked, and no
    problem, console error or remote request was seen."""
    with_explorers = {
        stem[:2] for stem, (explorers, _) in found["pages"].items() if re.match(r"\d\d_", stem) and explorers
    }
    assert with_explorers == set(EXPLORER_NOTEBOOKS), found["pages"]
    assert all(clicks >= explorers for explorers, clicks in found["pages"].values()), found["pages"]
    assert found["remote"] == [], found["remote"]
    assert found["errors"] == [], "\n".join(found["errors"])
    problems = found["problems"]
    assert problems == [], "\n".join(problems[:40]) + f"\n({len(problems)} problems)"
