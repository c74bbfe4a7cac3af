"""End to end in a real browser: JupyterLab from this environment runs a notebook, the
widgets and plotly figures render, and moving the k slider changes the live figure.

Drives Debian's chromium with Playwright (the system browser; `playwright install` is never
needed). Screenshots land in test-output/browser/ (git-ignored).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import chromium, needs_chromium, offline_context, record_errors
from helpers.plotly_axes import OUTSIDE

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-output" / "browser"
TOKEN = "rbplab-browser-test"

pytestmark = [pytest.mark.slow, pytest.mark.browser, needs_chromium]  # browser: and JupyterLab's kernels


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except OSError:
        return 0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """JupyterLab on localhost serving a copy of notebook 01 set to a synthetic study
    (no model runs: the test is about the front end, not extraction)."""
    import papermill

    work = tmp_path_factory.mktemp("lab")
    papermill.execute_notebook(
        str(ROOT / "notebooks" / "01_rbp_vs_size.ipynb"),
        str(work / "rbp.ipynb"),
        parameters={"synthetic": True, "n_boot": 10},
        prepare_only=True,
        progress_bar=False,
    )
    with _jupyterlab(work) as base:
        yield base


@contextlib.contextmanager
def _jupyterlab(work: Path, **env_extra: str) -> Iterator[str]:
    """JupyterLab on localhost serving `work` (its base URL), with a private config and runtime
    folder so no saved workspace or settings of the user leak in, shut down afterwards."""
    port = _free_port()
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(work / ".config"),
        JUPYTER_RUNTIME_DIR=str(work / ".runtime"),
        IPYTHONDIR=str(work / ".ipython"),
        **env_extra,
    )
    env.pop("RBPLAB_STATIC_FIGURES", None)
    log = (work / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={work}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),  # CI containers
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while _get(f"{base}/api/status?token={TOKEN}") != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start:\n{(work / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        request = urllib.request.Request(f"{base}/api/shutdown?token={TOKEN}", method="POST")
        try:
            urllib.request.urlopen(request, timeout=5)
            server.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            server.terminate()
            server.wait(timeout=10)
        log.close()


def _open_and_run_all(page, url: str) -> None:
    """Open a notebook in JupyterLab and run every cell from the Run menu, as a user would."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    # Some JupyterLab versions ask which kernel to start; accept the notebook's own.
    ready = page.locator(".jp-Dialog .jp-mod-accept").or_(page.get_by_text("| Idle"))
    ready.first.wait_for(timeout=90_000)
    if page.locator(".jp-Dialog .jp-mod-accept").count():
        page.locator(".jp-Dialog .jp-mod-accept").click()
    page.get_by_text("| Idle").wait_for(timeout=90_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


PLOT_STATE = """el => JSON.stringify({
    title: el.layout && el.layout.title ? el.layout.title.text : null,
    y: (el.data || []).map(d => Array.from(d.y || [])),
})"""


def test_notebook_runs_and_k_slider_updates_figure(lab: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        _open_and_run_all(page, f"{lab}/lab/tree/rbp.ipynb?token={TOKEN}")

        slider = page.locator(".widget-vbox .widget-hslider").first
        slider.wait_for(timeout=180_000)
        widget_plot = page.locator(".widget-vbox .js-plotly-plot").first
        widget_plot.wait_for(timeout=60_000)
        # Static figures (plotly mime renderer) and the FigureWidget both drew SVG traces.
        page.wait_for_function(
            "document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length > 10",
            timeout=60_000,
        )
        n_plots = page.locator(".js-plotly-plot").count()
        assert n_plots >= 3, f"expected Figure 3, Figure 4 and the widget figure, found {n_plots} plots"
        before = json.loads(widget_plot.evaluate(PLOT_STATE))
        assert "k=1 " in before["title"]
        # In a live front end the widget is the figure: no static copy is added.
        assert page.get_by_text("vs S at k=1 (|V|=4,096)").count() == 1
        # Subscripts are typeset (plotly HTML), never raw TeX-like text.
        assert "RBP_k" not in before["title"] and "RBP<sub>k</sub>" in before["title"]
        slider.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "01_before_k_slider.png"))

        # Drag the slider handle to 70 % of its track.
        handle = slider.locator(".noUi-handle").first
        track = slider.locator(".noUi-target").first
        hb, tb = handle.bounding_box(), track.bounding_box()
        page.mouse.move(hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2)
        page.mouse.down()
        page.mouse.move(tb["x"] + 0.7 * tb["width"], hb["y"] + hb["height"] / 2, steps=12)
        page.mouse.up()
        # The figure follows the slider while dragging; wait until it shows the final k.
        readout = slider.locator(".widget-readout").inner_text()
        page.wait_for_function(
            "([el, label]) => el.layout && el.layout.title && el.layout.title.text.includes(label)",
            arg=[widget_plot.element_handle(), f"at k={readout} "],
            timeout=30_000,
        )
        after = json.loads(widget_plot.evaluate(PLOT_STATE))
        # The live view autoranges: the new k's points, fit and band lie inside its axes.
        outside = widget_plot.evaluate(OUTSIDE)["problems"]
        page.screenshot(path=str(SHOTS / "02_after_k_slider.png"))
    k_after = int(readout.replace(",", ""))
    assert k_after > 1 and f"k={k_after:,}" in after["title"]
    assert after["y"] != before["y"]  # the points moved: RBP_k was looked up for the new k
    assert outside == [], outside
    assert (SHOTS / "02_after_k_slider.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def offline_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report folder as `run_report` writes it: a notebook page with an equation and a plotly
    figure, and the index with a headline figure and table (no kernel needed to make them)."""
    import nbformat
    import pandas as pd
    import plotly.graph_objects as go

    from rbplab.report import execution, handoff, index_page, pages

    out = tmp_path_factory.mktemp("report")
    nb = nbformat.v4.new_notebook()
    figure = go.Figure(go.Scatter(x=[1e4, 1e5, 1e6], y=[0.2, 0.4, 0.6], name="p"))
    code = nbformat.v4.new_code_cell("show(figure)")
    code.outputs = [nbformat.v4.new_output("display_data", data={pages.PLOTLY_MIME: figure.to_plotly_json()})]
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            r"The law: $-\log \mathrm{RBP}_k \propto S^{-\alpha}$ and $$p_{N,k} = e^{-C N S^{-\alpha}}$$"
        ),
        code,
    ]
    nbformat.write(nb, out / "eq.ipynb")
    page = pages.export_html(out / "eq.ipynb", out / "eq.html")
    tables = out / "eq"
    handoff.save_table(pd.DataFrame({"family": ["micro"], "alpha": [0.0423]}), "headline", tables)
    handoff.save_figure(figure, "headline", tables)
    result = execution.NotebookResult(
        notebook="eq", ok=True, seconds=1.0, executed=str(out / "eq.ipynb"), html=str(page),
        summary="micro: alpha=0.0423", table=str(tables / "headline.csv"),
        figure=str(tables / "headline.plotly.json"),
    )  # fmt: skip
    index_page.write_index([result], out, {"families": ["micro"]})
    return out


def test_report_renders_offline(offline_report: Path) -> None:
    """With every non-file request refused, the page typesets its equations with the report's
    own MathJax and draws its figure with the shared plotly.min.js; the index draws the
    headline figure. No page asks for a remote URL, no local asset is missing, and neither page
    logs a console error."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    remote: list[str] = []
    failed: list[str] = []
    errors: list[str] = []  # MathJax's font test once logged a CORS error on every page with math
    with chromium() as browser:
        context = offline_context(browser, {"width": 1200, "height": 900}, remote)
        page = context.new_page()
        page.on("requestfailed", lambda request: failed.append(request.url))
        record_errors(page, errors, "eq.html")
        page.goto((offline_report / "eq.html").as_uri())
        typeset_js = "document.querySelectorAll('.MathJax, .MathJax_Display').length >= 2"
        page.wait_for_function(f"window.MathJax && MathJax.Hub && {typeset_js}", timeout=60_000)
        page.wait_for_function(
            "!!(window.MathJax.Hub.queue && window.MathJax.Hub.queue.pending === 0)", timeout=60_000
        )
        page.wait_for_selector(".js-plotly-plot .scatterlayer .trace", timeout=30_000)
        # Results first: the code is hidden until the reader asks for it.
        code = page.locator(".jp-CodeCell .jp-Cell-inputWrapper").first
        assert not code.is_visible()
        page.locator("#rbplab-code-toggle").click()
        assert code.is_visible() and page.locator("#rbplab-code-toggle").inner_text() == "hide code"
        page.locator("#rbplab-code-toggle").click()
        assert not code.is_visible()
        # MathJax typeset the TeX: its output holds the glyphs, the raw TeX is gone from view.
        typeset = page.locator(".MathJax").first.inner_text()
        assert "RBP" in typeset.replace("\n", "") and "\\mathrm" not in page.inner_text("body")
        assert (
            page.locator(".MathJax_Error, .MathJax_Message:visible").count() == 0
            or not page.locator(".MathJax_Error").count()
        )
        page.screenshot(path=str(SHOTS / "03_offline_equation.png"), full_page=True)

        index = context.new_page()
        index.on("requestfailed", lambda request: failed.append(request.url))
        record_errors(index, errors, "index.html")
        index.goto((offline_report / "index.html").as_uri())
        index.wait_for_selector("#eq .js-plotly-plot .scatterlayer .trace", timeout=30_000)
        assert "0.0423" in index.locator("#eq table.headline").inner_text()
        index.screenshot(path=str(SHOTS / "04_offline_index.png"), full_page=True)
    assert remote == [], f"the report asked for remote URLs: {remote}"
    missing = [url for url in failed if url.startswith("file:")]
    assert missing == [], f"local assets missing: {missing}"
    assert errors == [], f"the offline pages logged errors: {errors}"


def test_lab_opens_notebook_06_on_the_checkpoints_the_demo_scored(
    tmp_path: Path, demo_checkpoints_template: tuple[Path, dict | None]
) -> None:
    """`make demo` then `make lab`: notebook 06 with its own defaults (only a small bootstrap)
    finds the checkpoints the demo's scoring step put in the cache and analyses them, not the
    synthetic fallback; its explorer's step slider offers exactly the demo's checkpoints."""
    import papermill
    from helpers.studies import copy_cache

    from rbplab.catalog.registry import schedule_of
    from rbplab.cli.demo import DEMO_REVISIONS
    from rbplab.study.loading import default_corpora

    # The demo's scoring step (`score_checkpoints` at 96 tokens), run once per session.
    scored, table = demo_checkpoints_template
    if table is None:
        pytest.skip("the micro-suite's checkpoints are not in data/")
    cache = copy_cache(scored, tmp_path / "cache")
    schedule = schedule_of("micro-1-25K")
    steps = {f"{schedule.step_of(r):,}" for r in schedule.select(DEMO_REVISIONS)}
    work = tmp_path / "lab06"
    work.mkdir()
    papermill.execute_notebook(
        str(ROOT / "notebooks" / "06_training_dynamics.ipynb"),
        str(work / "training.ipynb"),
        parameters={"n_boot": 5},
        prepare_only=True,
        progress_bar=False,
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    with _jupyterlab(work, RBPLAB_CACHE=str(cache)) as base, chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        _open_and_run_all(page, f"{base}/lab/tree/training.ipynb?token={TOKEN}")
        step = page.locator(".widget-hbox", has_text="step").locator(".widget-readout").first
        step.wait_for(timeout=300_000)
        page.locator(".widget-vbox .js-plotly-plot").first.wait_for(timeout=60_000)
        page.get_by_text("| Idle").wait_for(timeout=120_000)
        step.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "06_lab_on_demo_checkpoints.png"))
        readout = step.inner_text().strip()
        corpus = page.locator(".widget-dropdown select").first.input_value()
        text = page.locator(".jp-Notebook").inner_text()
    assert "SYNTHETIC DATA" not in text, "notebook 06 fell back to synthetic checkpoints"
    assert "Traceback" not in text
    assert readout in steps, (readout, steps)
    assert corpus in default_corpora(), corpus  # a synthetic study's only corpus is "known law"


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Notebook 01 executed headless on the synthetic study and exported as its report page, as
    `rbplab report` does (no kernel is left to answer the page)."""
    from rbplab.report import execution

    out = tmp_path_factory.mktemp("explorer")
    result = execution.execute_notebook(
        ROOT / "notebooks" / "01_rbp_vs_size.ipynb", out, {"synthetic": True, "n_boot": 10}
    )
    assert result.ok, result.error
    return Path(result.html)


EXPLORER_STATE = """el => JSON.stringify({
    title: el.layout.title.text,
    names: el.data.filter(d => d.visible !== false).map(d => d.name || ''),
})"""


def _move_k(page, plot) -> dict:
    """Click 45 % along the explorer's k slider, wait until the figure leaves k=1: its state then."""
    box = plot.locator(".slider-group").first.locator(".slider-rail-touch-rect").bounding_box()
    page.mouse.click(box["x"] + 0.45 * box["width"], box["y"] + box["height"] / 2)
    page.wait_for_function(
        "el => !el.layout.title.text.includes('at k=1 ')", arg=plot.element_handle(), timeout=30_000
    )
    return json.loads(plot.evaluate(EXPLORER_STATE))


def test_report_page_k_slider_changes_the_fitted_alpha_offline(explorer_page: Path) -> None:
    """The report page of notebook 01 carries the explorer's k slider: clicking along it redraws
    the figure at the chosen k and the legend shows the α the study's fit gives at that k, with
    every non-file request refused and no kernel."""
    import re

    from rbplab.study import size, synthetic_study

    SHOTS.mkdir(parents=True, exist_ok=True)
    remote: list[str] = []
    with chromium() as browser:
        context = offline_context(browser, {"width": 1200, "height": 1000}, remote)
        page = context.new_page()
        page.goto(explorer_page.as_uri())
        plot = page.locator(".js-plotly-plot", has=page.locator(".slider-group")).first
        plot.wait_for(timeout=60_000)
        plot.scroll_into_view_if_needed()
        before = json.loads(plot.evaluate(EXPLORER_STATE))
        assert "at k=1 " in before["title"]
        after = _move_k(page, plot)
        page.screenshot(path=str(SHOTS / "05_report_explorer_k.png"), full_page=True)
        # The corpus menu: the other corpus at the view's opening k, then k moves within it.
        plot.locator(".updatemenu-header-group").first.click()
        plot.locator(".updatemenu-dropdown-button", has_text="synthetic-b").first.click()
        page.wait_for_function(
            "el => el.layout.title.text.includes('at k=1 ')", arg=plot.element_handle(), timeout=30_000
        )
        other = json.loads(plot.evaluate(EXPLORER_STATE))
        other_after = _move_k(page, plot)
    assert remote == [], f"the report asked for remote URLs: {remote}"
    k = int(re.search(r"at k=([\d,]+) ", after["title"])[1].replace(",", ""))
    study = synthetic_study()  # the notebook's synthetic=True study
    corpus = study.corpora[0]  # the view opens on the first corpus
    alphas = [f"α = {a:.3f}" for a in size.fits(study, [1, k], corpora=[corpus])["alpha"]]
    assert alphas[0] != alphas[1]
    assert any(alphas[0] in name for name in before["names"])
    assert any(alphas[1] in name for name in after["names"]), (k, alphas, after["names"])
    assert other_after["title"] == after["title"]  # the same k step in the other corpus's slider
    other_alphas = [f"α = {a:.3f}" for a in size.fits(study, [1, k], corpora=["synthetic-b"])["alpha"]]
    assert other_alphas[0] != alphas[0]
    assert any(other_alphas[0] in name for name in other["names"]), (other_alphas, other["names"])
    assert any(other_alphas[1] in name for name in other_after["names"]), (other_alphas, other_after["names"])
