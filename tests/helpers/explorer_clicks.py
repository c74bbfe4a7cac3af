"""Click every option of every control of an offline explorer as a reader does (the browser tests).

An explorer (rbplab.viz.states) is a plotly figure with a last control (a slider, or a dropdown
of named choices) in one copy per choice of the control before it (a dropdown or a slider), only
the chosen copy drawn. `click_every_option` picks each choice of the second control by clicking
it, and in each copy clicks every step or option; before each click it asks the page which
element lies under the pointer (an option that lies under the next cell of the page cannot be
clicked), and after it, whether the figure changed.
"""

from __future__ import annotations

EXPLORER_NOTEBOOKS = ("01", "02", "03", "04", "06")  # the notebooks whose pages show explorers

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

# The element under a point (page coordinates relative to the viewport) and whether it lies in
# `selector`'s n-th match within the plot: [inside, a description of the element hit].
HIT = """(el, [x, y, selector, n]) => {
    const target = el.querySelectorAll(selector)[n];
    const hit = document.elementFromPoint(x, y);
    const name = hit ? `${hit.tagName.toLowerCase()}.${hit.getAttribute('class') || ''}`
        + ` "${(hit.textContent || '').trim().slice(0, 40)}"` : 'nothing';
    return [!!(target && hit && target.contains(hit)), name];
}"""

# Where a menu's header, or its n-th opened option, lies: its centre (viewport coordinates).
MENU_HEADER = """(el, [index]) => {
    const g = Array.from(el.querySelectorAll('g.updatemenu-header-group'))
        .find(h => h.__data__._index === index);
    const r = g.querySelector('g.updatemenu-header').getBoundingClientRect();
    return [r.x + r.width / 2, r.y + r.height / 2];
}"""
OPTION = "g.updatemenu-dropdown-button-group g.updatemenu-dropdown-button"
OPTION_AT = """(el, [n]) => {
    const b = el.querySelectorAll('g.updatemenu-dropdown-button-group g.updatemenu-dropdown-button')[n];
    if (!b) return null;
    const r = b.getBoundingClientRect();
    return [r.x + r.width / 2, r.y + r.height / 2];
}"""
# Where to click on slider `index` to pick its step `step`: the step's tick on the rail.
STEP_AT = """(el, [index, step]) => {
    const group = Array.from(el.querySelectorAll('g.slider-group')).find(g => g.__data__._index === index);
    const tick = group.querySelectorAll('rect.slider-tick-rect')[step].getBoundingClientRect();
    const rail = group.querySelector('rect.slider-rail-touch-rect').getBoundingClientRect();
    return [tick.x + tick.width / 2, rail.y + rail.height / 2];
}"""
SLIDER_GROUP = "g.slider-group"
SLIDER_NTH = """(el, index) => Array.from(el.querySelectorAll('g.slider-group'))
    .findIndex(g => g.__data__._index === index)"""
MENU = "g.updatemenu-header-group"
MENU_NTH = """(el, index) => Array.from(el.querySelectorAll('g.updatemenu-header-group'))
    .findIndex(g => g.__data__._index === index)"""


def _in_view(page, plot, where_js: str, args: list) -> tuple[float, float] | None:
    """The viewport point `where_js` returns, the page scrolled first so that it lies in view."""
    point = plot.evaluate(where_js, args)
    if point is None:
        return None
    height = page.evaluate("window.innerHeight")
    x, y = point
    if not 10 <= y <= height - 10:
        page.evaluate("dy => window.scrollBy(0, dy)", y - height / 2)
        x, y = plot.evaluate(where_js, args)
    return x, y


def _under_pointer(page, plot, args: list) -> bool:
    """Whether the element under the point lies in the target within a second: a menu that
    closes is removed over a few frames, so a closing menu's option may lie there briefly."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            f"([el, args]) => ({HIT})(el, args)[0]", arg=[plot.element_handle(), args], timeout=1_000
        )
    except PlaywrightTimeout:
        return False
    return True


def _click(page, plot, x: float, y: float, selector: str, nth: int, what: str, problems: list[str]) -> bool:
    """Click at (x, y) when the element there lies in `selector`'s `nth` match, and wait for the
    redraw; False (with a problem) when something else lies there or the figure does not redraw."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    if not _under_pointer(page, plot, [x, y, selector, nth]):
        hit = plot.evaluate(HIT, [x, y, selector, nth])[1]
        problems.append(f"{what}: under the pointer lies {hit}, not the option")
        page.mouse.click(5, 5)  # close an opened menu
        return False
    before = plot.evaluate("el => el.__redraws")
    page.mouse.click(x, y)
    try:
        page.wait_for_function(SETTLED, arg=[plot.element_handle(), before], timeout=15_000)
    except PlaywrightTimeout:
        problems.append(f"{what}: the figure did not redraw")
        return False
    page.wait_for_timeout(30)
    return True


def _choose(page, plot, kind: str, index: int, option: int, what: str, problems: list[str]) -> bool:
    """Click option `option` of the menu or slider `index` of layout.updatemenus or .sliders."""
    if kind == "slider":
        point = _in_view(page, plot, STEP_AT, [index, option])
        nth = plot.evaluate(SLIDER_NTH, index)
        return _click(page, plot, *point, SLIDER_GROUP, nth, what, problems)
    header = _in_view(page, plot, MENU_HEADER, [index])
    nth = plot.evaluate(MENU_NTH, index)
    if not _under_pointer(page, plot, [*header, MENU, nth]):
        hit = plot.evaluate(HIT, [*header, MENU, nth])[1]
        problems.append(f"{what}: under the pointer at the menu's header lies {hit}")
        return False
    page.mouse.click(*header)
    page.wait_for_timeout(50)
    point = _in_view(page, plot, OPTION_AT, [option])
    if point is None:
        problems.append(f"{what}: the menu did not open")
        return False
    return _click(page, plot, *point, OPTION, option, what, problems)


def _order(n: int, active: int) -> list[int]:
    """Every option, the active one last (clicked while another is shown, so the figure changes)."""
    return [i for i in range(n) if i != active] + ([active] if 0 <= active < n else [])


def click_every_option(page, plot, where: str) -> tuple[int, list[str]]:
    """Click every option of every control of the explorer `plot`: (clicks made, problems seen).
    A click whose figure does not change, or whose option is not under the pointer, is a problem."""
    plot.scroll_into_view_if_needed()
    plot.evaluate(WATCH)
    problems: list[str] = []
    clicks = 0
    controls = plot.evaluate(CONTROLS)
    second = next((c for c in controls if c[4]), None)
    second_options = _order(second[2], second[3]) if second else [None]
    for choice in second_options:
        if second is not None:
            kind, index, n, _, _ = second
            what = f"{where}, {kind} {index + 1} option {choice + 1} of {n}"
            before = plot.evaluate(DIGEST)
            if not _choose(page, plot, kind, index, choice, what, problems):
                continue
            clicks += 1
            if plot.evaluate(DIGEST) == before and n > 1:
                problems.append(f"{what}: the figure did not change")
        last = [c for c in plot.evaluate(CONTROLS) if not c[4]]
        if len(last) != 1:
            problems.append(f"{where}: {len(last)} copies of the last control drawn, not 1")
            continue
        kind, index, n, active, _ = last[0]
        for option in _order(n, active):
            what = f"{where}, {kind} {index + 1} option {option + 1} of {n}"
            before = plot.evaluate(DIGEST)
            if not _choose(page, plot, kind, index, option, what, problems):
                continue
            clicks += 1
            if n > 1 and plot.evaluate(DIGEST) == before:
                problems.append(f"{what}: the figure did not change")
    return clicks, problems
