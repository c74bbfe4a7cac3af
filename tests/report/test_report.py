"""rbplab.report: execution, failure reporting, HTML export and the index page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from helpers.factories import one_token_entry

from rbplab.core.errors import InvalidArgumentError
from rbplab.grid import Grid
from rbplab.report import ReportOptions, execution, handoff, index_page, pages, run, run_report


def _notebook(path: Path, cells: list[str], parameters: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    param = nbformat.v4.new_code_cell(parameters)
    param.metadata["tags"] = ["parameters"]
    nb.cells = [param] + [
        nbformat.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbformat.v4.new_code_cell(c)
        for c in cells
    ]
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, list[str], Path]:
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("out")
    params = "families = ['x']\nsettings = {}\noutput_dir = None\nscale = 1.0"
    _notebook(
        src / "a_ok.ipynb",
        [
            "import os, pandas as pd, plotly.graph_objects as go\n"
            "from rbplab import report\nfrom rbplab.viz.widgets import show",
            "show(go.Figure(go.Scatter(x=[1, 2, 3], y=[2, 4, 8])))",
            "headline = pd.DataFrame(\n"
            "    {'family': families, 'alpha': [0.125 * scale], 'tokens': [settings.get('max_tokens')]}\n"
            ")\n"
            "report.save_table(headline, 'headline', output_dir)\n"
            "print(os.environ.get('RBPLAB_STATIC_FIGURES'))",
            "fig = go.Figure(go.Scatter(x=[10, 20], y=[0.5, 0.7], name='headline-trace'))\n"
            "show(report.save_figure(fig, 'headline', output_dir))",
            "md:The law: $-\\log \\mathrm{RBP}_k \\propto S^{-\\alpha}$",
        ],
        params,
    )
    _notebook(
        src / "b_fails.ipynb",
        ["x = 1", "raise ValueError('the corpus is empty')", "never = True"],
        params,
    )
    _notebook(
        src / "c_states.ipynb",
        [
            "md:# 3 · A stated result\n\nSome text.",
            "from rbplab import report",
            "report.banner('SYNTHETIC DATA: made up', output_dir)",
            "report.headline(f'-log RBP_1 falls with α = {0.036 * scale:.3f} [0.030, 0.043]', output_dir)",
        ],
        params,
    )
    lines: list[str] = []
    table = run_report(
        Grid.from_names("micro", max_tokens=123),
        out,
        parameters={"scale": 2.0},
        options=ReportOptions(notebooks=("b_fails", "a_ok", "c_states"), source_dir=src),
        progress=lines.append,
    )
    return table, lines, out


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_each_notebook_gets_a_row_in_the_requested_order(executed) -> None:
    table, _, _ = executed
    assert list(table["notebook"]) == ["b_fails", "a_ok", "c_states"]
    assert list(table["ok"]) == [False, True, True]


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_failure_names_cell_and_error_and_others_still_run(executed) -> None:
    table, lines, out = executed
    failed = table.set_index("notebook").loc["b_fails"]
    # cell 4 of the executed notebook: parameters, injected parameters, x = 1, raise
    assert failed["error"].startswith("cell 4 (In [4]: raise ValueError('the corpus is empty')): ")
    assert failed["error"].endswith("ValueError: the corpus is empty")
    assert (out / "b_fails.ipynb").is_file() and (out / "b_fails.html").is_file()
    assert any("b_fails: FAILED" in line and "the corpus is empty" in line for line in lines)
    assert any(line.startswith("[2/3] a_ok: ok") for line in lines)


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_parameters_and_headline_summary(executed) -> None:
    table, _, out = executed
    ok = table.set_index("notebook").loc["a_ok"]
    assert ok["summary"] == "micro: alpha=0.250, tokens=123"  # family, scale and settings passed through
    assert pd.read_csv(out / "a_ok" / "headline.csv")["alpha"].tolist() == [0.25]
    nb = nbformat.read(out / "a_ok.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "1" in printed.split()  # the kernel was told to add static figures


def _script_and_link_urls(page: str) -> list[str]:
    return re.findall(r'<(?:script|link)[^>]*?(?:src|href)="([^"]*)"', page) + re.findall(
        r'import\("([^"]*)"\)', page
    )


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_pages_share_one_plotly_js_and_a_local_mathjax(executed) -> None:
    _, _, out = executed
    assert sorted(p.name for p in out.rglob("plotly*.js")) == ["plotly.min.js"]  # one copy for the report
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    assert (out / "mathjax" / "MathJax.js").is_file()
    assert (out / "mathjax" / "config" / "TeX-AMS-MML_HTMLorMML-full.js").is_file()
    assert (out / "mathjax" / "fonts" / "HTML-CSS" / "STIX-Web").is_dir()
    assert not list(out.rglob("mathmaps"))  # the accessibility explorer's speech rules stay out
    for name in ("a_ok.html", "b_fails.html", "c_states.html", "index.html"):
        page = (out / name).read_text()
        assert len(page) < 1_000_000, name  # plotly.js (4.8 MB) is referenced, not inlined
        urls = _script_and_link_urls(page)
        assert "plotly.min.js" in urls, name
        assert not [u for u in urls if re.match(r"(https?:)?//", u)], (name, urls)  # nothing from a CDN
    page = (out / "a_ok.html").read_text()
    assert pages.MATHJAX_URL in _script_and_link_urls(page)
    assert "cdnjs" not in page and "require.min.js" not in page
    assert page.index('webFont: "STIX-Web"') < page.index(pages.MATHJAX_URL)  # configured before loading
    assert page.count("Plotly.newPlot") == 2 and "application/vnd.plotly.v1+json" not in page
    assert "\\mathrm{RBP}_k" in page  # the equation is on the page for MathJax to typeset


def test_assets_are_written_once(tmp_path: Path) -> None:
    first = pages.write_assets(tmp_path)
    stamp = {k: p.stat().st_mtime_ns for k, p in first.items()}
    again = pages.write_assets(tmp_path)
    assert {k: p.stat().st_mtime_ns for k, p in again.items()} == stamp


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_index_links_every_notebook(executed) -> None:
    _, _, out = executed
    index = (out / "index.html").read_text()
    for name in ("a_ok.html", "a_ok.ipynb", "b_fails.html"):
        assert f'href="{name}"' in index
    assert "micro: alpha=0.250, tokens=123" in index and "FAILED" in index and "the corpus is empty" in index


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_index_shows_headline_figure_and_table(executed) -> None:
    table, _, out = executed
    ok = table.set_index("notebook").loc["a_ok"]
    assert ok["figure"].endswith("headline.plotly.json") and ok["table"].endswith("headline.csv")
    index = (out / "index.html").read_text()
    section = index[index.index('<section id="a_ok"') :]
    section = section[: section.index("</section>")]
    # The figure: a plotly div with the saved trace, drawn by the shared plotly.min.js.
    assert section.count("Plotly.newPlot") == 1 and "headline-trace" in section
    assert '<script type="text/javascript" src="plotly.min.js"></script>' in index
    # The table as HTML with its values.
    assert '<table class="dataframe headline">' in section
    # Headers read as words, the identifier in their tooltip.
    cells = (
        "<td>micro</td>",
        "<td>0.250</td>",
        "<td>123</td>",
        '<th title="alpha">α</th>',
        '<th title="tokens">tokens</th>',
    )
    for cell in cells:
        assert cell in section, cell
    failed = index[index.index('<section id="b_fails"') :]
    assert "FAILED: cell 4" in failed[: failed.index("</section>")]


def test_unknown_notebook_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown notebooks"):
        run_report(
            Grid.from_names("micro"),
            tmp_path,
            options=ReportOptions(notebooks=("99_nothing",)),
            progress=None,
        )
    with pytest.raises(FileNotFoundError, match="no notebooks"):
        execution.list_notebooks(tmp_path)


def test_export_drops_stateless_widgets(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    fig = go.Figure(go.Bar(x=["a"], y=[1]))
    cell = nbformat.v4.new_code_cell("view")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={pages.WIDGET_MIME: {"model_id": "abc", "version_major": 2}, "text/plain": "VBox()"},
        ),
        nbformat.v4.new_output("display_data", data={pages.PLOTLY_MIME: fig.to_plotly_json()}),
    ]
    nb.cells = [cell]
    path = tmp_path / "w.ipynb"
    nbformat.write(nb, path)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(nb, path)
    page = pages.export_html(path, tmp_path / "w.html").read_text()
    assert "VBox()" not in page and page.count("Plotly.newPlot") == 1
    assert "html-manager" not in page  # no widget renderer fetched from a CDN


def test_headline_text_and_save_table(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"family": ["f", "f"], "corpus": ["a", "b"], "alpha": [0.0512345, 0.1], "r2": [0.99, None]}
    )
    assert handoff.headline_text(frame) == "f/a: alpha=0.0512, r2=0.990; f/b: alpha=0.100, r2=n/a"
    # whole numbers as integers (a CSV column with a gap reads back as floats: k 1.0, S 25472.0)
    whole = pd.DataFrame({"corpus": ["a"], "k": [1.0], "S": [25472.0], "n": [np.int64(6)]})
    assert handoff.headline_text(whole) == "a: k=1, S=25.5K, n=6"
    # an estimate with its interval, as the tables show it; a column all below display precision
    # (a fit at its bound 0, or rounding noise) as 0, one such value among others as a bound
    fit = pd.DataFrame({"quantity": ["CE"], "alpha": [0.1234], "alpha_low": [0.1011], "alpha_high": [0.1452]})
    assert handoff.headline_text(fit.assign(E=3.5e-121)) == "CE: alpha=0.123 [0.101, 0.145], E=0"
    two = pd.concat([fit, fit]).assign(E=[3.5e-121, 0.5])
    assert handoff.headline_text(two).endswith("E=< 1e-6; CE: alpha=0.123 [0.101, 0.145], E=0.500")
    assert handoff.save_table(frame, "t", None) is frame and not any(tmp_path.iterdir())
    handoff.save_table(frame, "t", tmp_path / "sub")
    assert pd.read_csv(tmp_path / "sub" / "t.csv").shape == (2, 4)


def test_save_figure(tmp_path: Path) -> None:
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 3]))
    assert handoff.save_figure(fig, "f", None) is fig and not any(tmp_path.iterdir())
    assert handoff.save_figure(fig, "f", tmp_path / "sub") is fig
    saved = json.loads((tmp_path / "sub" / "f.plotly.json").read_text())
    assert saved["data"][0]["type"] == "bar" and list(saved["data"][0]["x"]) == ["a", "b"]


@pytest.mark.notebook
def test_kernel_start_prints_no_transport_warning(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    source = _notebook(tmp_path / "quiet.ipynb", ["print('ran', x)"], "x = 1")
    result = execution.execute_notebook(source, tmp_path / "out", {"x": 2}, html_export=False)
    err = capfd.readouterr().err
    assert result.ok, result.error
    executed = nbformat.read(result.executed, as_version=4)
    assert "ran 2" in executed.cells[-1].outputs[0]["text"]
    assert "without encryption" not in err and "Kernel is running" not in err


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_headline_sentence_banner_and_title(executed) -> None:
    table, _, out = executed
    row = table.set_index("notebook").loc["c_states"]
    assert row["summary"] == "-log RBP_1 falls with α = 0.072 [0.030, 0.043]"  # scale = 2 passed through
    assert row["banner"] == "SYNTHETIC DATA: made up" and row["title"] == "3 · A stated result"
    assert (out / "c_states" / "headline.txt").read_text().strip() == row["summary"]
    index = (out / "index.html").read_text()
    assert '<div class="banner">SYNTHETIC DATA: made up</div>' in index  # loud, above the result
    assert "-log RBP<sub>1</sub> falls with α = 0.072" in index  # no raw RBP_1 on the page
    assert '<a href="#c_states">3 · A stated result</a>' in index
    page = (out / "c_states.html").read_text()
    assert "<title>3 · A stated result · rbplab report</title>" in page
    assert 'class="rbplab-banner"' in page and 'class="rbplab-headline"' in page


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_code_is_hidden_behind_a_toggle(executed) -> None:
    _, _, out = executed
    page = (out / "a_ok.html").read_text()
    body = re.search(r"<body[^>]*>", page).group(0)
    assert "rbplab-hide-code" in body
    assert 'id="rbplab-code-toggle"' in page and "rbplabToggleCode" in page
    css = page[page.index("body.rbplab-hide-code") :][:400]
    assert ".jp-Cell-inputWrapper { display: none; }" in css and "jp-mod-noOutputs { display: none; }" in css
    assert "celltag_injected-parameters" in page  # still there for "show code", hidden: it has no output


@pytest.mark.notebook  # the module's `executed` report runs three kernels
def test_results_file(executed) -> None:
    from rbplab.study.results import load_results

    _, _, out = executed
    results = load_results(out / "results.json")
    assert results.settings["max_tokens"] == 123
    assert results.table("a_ok")["alpha"].tolist() == [0.25]
    assert results.headlines["c_states"].startswith("-log RBP_1 falls with α = 0.072")
    assert "b_fails" not in results.tables  # a failed notebook contributes nothing
    assert 'href="results.json"' in (out / "index.html").read_text()


def test_unknown_parameter_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from rbplab.viz.parameters import ParameterError

    src = tmp_path / "src"
    src.mkdir()
    _notebook(src / "n.ipynb", ["x = 1"], "scale = 1.0\nn_boot = 2")
    with pytest.raises(
        ParameterError, match=r"no notebook takes parameter 'n_bot' \(did you mean 'n_boot'\?\)"
    ):
        run_report(
            Grid.from_names("micro"),
            tmp_path / "out",
            parameters={"n_bot": 3},
            options=ReportOptions(source_dir=src),
        )
    assert not (tmp_path / "out").exists()


def test_index_states_the_resolved_grid(tmp_path: Path) -> None:
    grid = {
        "study_file": None,
        "families": ["micro"],
        "models": [{"family": "micro", "model": "micro-1-25K", "S": 25472.0}],
        "corpora": ["humaneval", "prose"],
        "settings": {"max_tokens": 2000, "context_length": None},
        "settings_changed": {"max_tokens": 2000},
        "extract": False,
    }
    page = index_page.write_index([], tmp_path, grid).read_text()
    assert "<dt>family micro</dt><dd>1 models: micro-1-25K (S = 25.5K)</dd>" in page
    assert "<dt>corpora</dt><dd>humaneval, prose</dd>" in page
    assert "max_tokens = 2000; the rest at their defaults" in page
    assert "null" not in page
    assert "A · S<sup>−α</sup>" in page  # the law, stated


def test_export_figures_writes_each_format_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list = []
    sizes: list = []
    monkeypatch.setattr(
        "rbplab.viz.export.save_many",
        lambda figs, paths, size: (written.extend(paths), sizes.append(size)),
    )
    folder = tmp_path / "01_x"
    fig = go.Figure(go.Scatter(x=[1], y=[2]))
    handoff.save_figure(fig, "figure3", folder)
    handoff.save_figure(fig, "headline", folder)  # the same figure: not exported twice
    handoff.save_figure(go.Figure(go.Bar(x=["a"], y=[1])), "figure4", folder)
    result = execution.NotebookResult("01_x", True, 1.0, None, None, "")
    assert run.export_figures([result], tmp_path, ["png", "pdf"]) == 4
    assert sizes == ["full"]  # paper figures, 7 in wide, unless asked otherwise
    names = sorted(p.relative_to(tmp_path).as_posix() for p in written)
    assert names == [f"figures/01_x/{n}.{f}" for n in ("figure3", "figure4") for f in ("pdf", "png")]
    assert sorted(Path(p).name for p in result.exports) == sorted(Path(n).name for n in names)


# ---------------------------------------------------------------------------------------------
# Issue 30: the grid resolved up front, notebooks by number, the report text.


def test_unresolvable_grid_fails_once_before_any_notebook(tmp_path: Path) -> None:
    """An unknown model is one error before any notebook runs (each notebook used to fail on it
    in turn, and the training notebook reported "ok" on synthetic data)."""
    from rbplab.core.errors import RbplabError

    src = tmp_path / "src"
    src.mkdir()
    _notebook(src / "n.ipynb", ["open('ran', 'w').close()"], "families = ['x']\nextract = False")
    with pytest.raises(RbplabError, match="no-such-model") as caught:
        run_report(
            Grid.read({"families": ["micro"], "models": ["no-such-model"], "corpora": ["prose"]}),
            tmp_path / "out",
            options=ReportOptions(source_dir=src),
        )
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists() and not (src / "ran").exists()


def test_missing_runs_are_refused_before_any_notebook(tmp_path: Path) -> None:
    """A notebook that reads the grid from the cache (it declares `extract`) on an empty cache:
    one MissingRunsError naming the runs, nothing executed; the fix reads as the caller says it."""
    from rbplab.study.lookup import MissingRunsError

    src = tmp_path / "src"
    src.mkdir()
    _notebook(src / "n.ipynb", ["open('ran', 'w').close()"], "families = ['x']\nextract = False")
    grid, out, cache = Grid.from_names("micro", ["prose"]), tmp_path / "out", tmp_path / "cache"
    with pytest.raises(MissingRunsError, match=r"6 run\(s\) are not in the cache.*with extract=True"):
        run_report(grid, out, cache_dir=cache, options=ReportOptions(source_dir=src))
    remedy = ReportOptions(source_dir=src, missing_remedy="--extract: rbplab x")
    with pytest.raises(MissingRunsError, match=r"micro-1-25K on prose.*with --extract: rbplab x$"):
        run_report(grid, out, cache_dir=cache, options=remedy)
    assert not (tmp_path / "out").exists() and not (src / "ran").exists()


def test_notebooks_are_chosen_by_name_or_number(tmp_path: Path) -> None:
    paths = [tmp_path / f"{n}.ipynb" for n in ("01_rbp_vs_size", "02_k_sweep", "10_more")]
    assert execution.select_notebooks(paths, ["02", "1", "01_rbp_vs_size.ipynb", "10"]) == [
        paths[1],
        paths[0],
        paths[2],
    ]
    with pytest.raises(InvalidArgumentError, match=r"unknown notebooks \['03'\]"):
        execution.select_notebooks(paths, ["03"])
    with pytest.raises(InvalidArgumentError, match=r"did you mean '02_k_sweep'"):
        execution.select_notebooks(paths, ["02_k_swep"])


def _estimates(sentence: str) -> int:
    """Estimates a sentence states: each with its interval, or a coverage count (5/6)."""
    return sentence.count("[") + sentence.count("(at a bound") + len(re.findall(r"\d+/\d+", sentence))


def test_the_extraction_headline_counts_the_grid_apart_from_the_rest_of_the_cache() -> None:
    """05 said "144 complete entries ... 6 models × 4 corpora" of a 2-corpus grid whose cache held
    the demo's 120 checkpoints too: the grid's runs and the cache's entries are counted apart."""
    from rbplab.viz import headlines

    models = [f"micro-{i}" for i in range(6)]
    runs = pd.DataFrame(
        [{"model": m, "corpus": c, "n_tokens": 300} for m in models for c in ("prose", "humaneval")]
    )
    corpora = ["humaneval", "legal-standin", "prose", "wikipedia"]
    finals = [{"model": m, "corpus": c, "revision": None} for m in models for c in corpora]
    steps = [
        {"model": m, "corpus": c, "revision": f"step-{s}"} for m in models for c in corpora for s in range(5)
    ]
    entries = pd.DataFrame(finals + steps).assign(complete=True, new=False)
    entries.loc[[0, 30], "new"] = True
    entries.loc[len(entries)] = {
        "model": "x",
        "corpus": "prose",
        "revision": None,
        "complete": False,
        "new": True,
    }
    assert headlines.extraction(runs, entries) == (
        "The grid's 12 runs (6 models × 2 corpora, 3,600 scored tokens) are in the cache; it holds 144 "
        "complete entries in all (24 of final models, 120 of checkpoints), 2 new in this run."
    )


def test_each_sentence_states_at_most_four_estimates() -> None:
    """06 and 07 used to state 12-16 estimates; the rest are in their tables."""
    from rbplab.viz import headlines

    corpora = ["humaneval", "legal-standin", "prose", "wikipedia"]
    joint = pd.DataFrame(
        [
            {"corpus": c, "quantity": q, "alpha": 0.3, "alpha_low": 0.2, "alpha_high": 0.4}
            | {"beta": 0.25, "beta_low": 0.2, "beta_high": 0.3}
            for c in corpora
            for q in ("RBP_1", "RBP_100", "CE")
        ]
    )
    sentence = headlines.training(joint, synthetic=False)
    assert _estimates(sentence) == 4 and "RBP_1: α = 0.300 [0.200, 0.400]" in sentence
    assert "CE: α" in sentence and "RBP_100" not in sentence and "10 more laws in the table" in sentence
    fits = pd.DataFrame(
        [
            {"corpus": c, "metric": m, "alpha": 0.02, "alpha_low": 0.01, "alpha_high": 0.03, "r2": 0.97}
            for c in corpora
            for m in ("ce", "ee", "sa", "conf")
        ]
    )
    audit = pd.DataFrame(
        [
            {"n_holdout": n, "metric": m, "n_covered": 5, "n": 6, "median_abs_units": 0.4}
            for n in (1, 2)
            for m in ("rbp", "ce", "ee")
        ]
    )
    seven = headlines.decomposition(fits) + " " + headlines.prediction_audit(audit)
    assert _estimates(seven) == 4 and "3 more corpora in the table" in seven and "SA α" not in seven
    assert "−log RBP_k 5/6, CE 5/6 (the other metrics" in seven
    sweep = pd.DataFrame(
        [
            {"family": "micro", "corpus": c, "k": k, "alpha": 0.02, "alpha_low": 0.01, "alpha_high": 0.03}
            for c in corpora
            for k in (1, 100)
        ]
    )
    summary = pd.DataFrame({"family": "micro", "corpus": corpora, "k_max_law": [10.0] * 4})
    assert _estimates(headlines.k_sweep(sweep, summary)) == 4
    fits01 = pd.DataFrame(
        {"family": "micro", "corpus": corpora, "k": 1, "alpha": 0.02, "r2": [0.9, 0.95, 0.97, 0.99]}
        | {"alpha_low": 0.01, "alpha_high": 0.03}
    )
    one = headlines.size_law(fits01)
    assert _estimates(one) == 4 and "R² 0.900 to 0.990" in one


def test_index_table_shows_sizes_intervals_and_no_interval_that_excludes_its_estimate(tmp_path: Path) -> None:
    path = tmp_path / "headline.csv"
    pd.DataFrame(
        {"quantity": ["CE", "RBP_1"], "k": [1.0, None], "S": [25472.0, 85_056_000.0], "E": [1.29e-17, 0.5]}
        | {"E_low": [9.36e-14, 0.4], "E_high": [9.36e-14, 0.6], "alpha": [0.1234, 3.5e-121]}
    ).to_csv(path, index=False)
    page = index_page._headline_table_html(path)
    assert (
        "<td>25.5K</td>" in page and "<td>85.1M</td>" in page and "<td>1</td>" in page and "25472" not in page
    )
    assert "9.36e-14" not in page and "<td>&lt; 1e-6 (at a bound of its fit: no interval)</td>" in page
    assert "<td>0.500 [0.400, 0.600]</td>" in page and "<td>&lt; 1e-6</td>" in page and "<td>n/a</td>" in page
    assert 'class="table-box"' in page  # a wide table scrolls in its box, not past the page's edge


def test_extraction_on_an_unreachable_hub_fails_once_before_any_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --extract the corpora are opened before notebook 05 runs: a hub that cannot be reached
    is one error (it used to fail six notebooks one by one, and 06 reported "ok" on synthetic data)."""
    from rbplab.core.errors import RbplabError

    def unreachable(corpus, *args, **kwargs):
        raise OSError(f"cannot resolve {corpus} to a commit (the hub cannot be reached)")

    monkeypatch.setattr("rbplab.grid.open_corpus", unreachable)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("05_extraction", "06_training_dynamics"):
        _notebook(src / f"{name}.ipynb", ["open('ran', 'w').close()"], "families = ['x']\nextract = False")
    with pytest.raises(RbplabError, match=r"grid cannot be resolved: cannot resolve hub:wikipedia") as caught:
        run_report(
            Grid.from_names("micro", ["hub:wikipedia"]),
            tmp_path / "out",
            extract=True,
            options=ReportOptions(source_dir=src),
            progress=None,
        )
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists() and not (src / "ran").exists()


def test_k_sweep_sentence_states_the_law_range_not_the_r2_range() -> None:
    """On the paper's GPT-2 numbers R² stays >= 0.9 up to k = 10,000, but alpha is negative there
    (tests/analysis/test_ksweep.py derives both ranges independently): the sentence says 1,000."""
    from rbplab.analysis import ksweep
    from rbplab.catalog import paper_reference
    from rbplab.viz import headlines

    ref = paper_reference()
    sweep = ksweep.k_sweep(ref.assign(metric="rbp", loss=-np.log(ref["rbp"])))
    text = headlines.k_sweep(sweep, ksweep.sweep_summary(sweep))
    assert "the law holds up to k = 1,000," in text and "10,000" not in text


@pytest.mark.notebook
def test_a_study_files_settings_key_its_runs_in_the_results_file(tmp_path: Path) -> None:
    """results.json states the settings the notebooks analysed, a study file's own, and keys each
    run by them: the report used to state (and match cache keys with) the caller's settings, the
    defaults, so a study capped at 300 tokens had every cache_key null and max_tokens null."""
    import json

    from rbplab.catalog import registry

    model = registry.family_models("micro")["model"].iloc[0]
    cache = tmp_path / "cache"
    entry = one_token_entry(cache, {"model": {"name": model}, "corpus": {"name": "prose"}, "max_tokens": 300})
    study = tmp_path / "study.toml"
    study.write_text(f'models = ["{model}"]\ncorpora = ["prose"]\n[settings]\nmax_tokens = 300\n')
    src = tmp_path / "src"
    src.mkdir()
    _notebook(
        src / "n.ipynb",
        [
            "import pandas as pd\nfrom rbplab import report\n"
            f"runs = pd.DataFrame({{'model': ['{model}'], 'corpus': ['prose']}})\n"
            "report.save_table(runs, 'runs', output_dir)"
        ],
        "study_file = None\noutput_dir = None",
    )
    table = run_report(
        Grid.read(study), tmp_path / "out", cache_dir=cache, options=ReportOptions(source_dir=src)
    )
    assert table["ok"].all(), table["error"].tolist()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["settings"]["max_tokens"] == 300
    runs = dict(zip(results["runs"]["columns"], results["runs"]["rows"][0], strict=True))
    assert runs["cache_key"] == entry.key
