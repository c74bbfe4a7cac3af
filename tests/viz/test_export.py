"""rbplab.viz.save: figures as PNG, SVG and PDF through kaleido, HTML and JSON without it."""

from __future__ import annotations

import json
import re
import struct

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from helpers.browser import needs_kaleido

from rbplab import viz
from rbplab.study import emergence, size
from rbplab.viz.export import FigureExportError, check_formats, save_many


def _figure() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[1, 4, 9], name="squares"))
    fig.update_layout(width=420, height=260, title="exported")
    return fig


@needs_kaleido
def test_png_svg_pdf(tmp_path):
    fig = _figure()
    paths = save_many(
        [fig] * 3, [tmp_path / "f.png", tmp_path / "f.svg", tmp_path / "f.pdf"], size="screen", title=True
    )
    png, svg, pdf = (p.read_bytes() for p in paths)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: twice the layout's pixels
    assert (width, height) == (2 * 420, 2 * 260)
    assert svg.lstrip().startswith(b"<svg") and b"exported" in svg
    assert pdf.startswith(b"%PDF-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png", "f.svg"]  # no temporaries


def _media_box(pdf: bytes) -> list[float]:
    return [float(v) for v in re.search(rb"MediaBox\s*\[([^\]]*)\]", pdf)[1].split()]


def _study_figure():
    from rbplab.study import synthetic_study
    from rbplab.viz import plots

    study = synthetic_study(n_tokens=2000)
    return plots.rbp_vs_size(study.points([1, 100]), size.fits(study, [1, 100]), size.bands(study, [1, 100]))


@needs_kaleido
def test_paper_figures_are_a_column_or_the_text_width_with_8_to_9_pt_text(tmp_path):
    fig = _study_figure()
    full, column, titled = tmp_path / "full.pdf", tmp_path / "column.pdf", tmp_path / "titled.svg"
    save_many([fig, fig], [full, column.with_suffix(".svg")], size="full")
    save_many([fig, fig], [column, tmp_path / "column.png"], size="column")
    viz.save(fig, titled, size="full", title=True)
    assert _media_box(full.read_bytes())[2] == pytest.approx(7 * 72)  # points: 7 in, a page's text width
    assert _media_box(column.read_bytes())[2] == pytest.approx(3.5 * 72)  # one column
    width = struct.unpack(">II", (tmp_path / "column.png").read_bytes()[16:24])[0]
    assert width == pytest.approx(3.5 * 300, abs=2)  # 300 dpi
    svg = column.with_suffix(".svg").read_text()
    sizes = {float(v) for v in re.findall(r"font-size: ?([\d.]+)px", svg)}
    assert sizes and min(sizes) * 0.75 >= 8 - 1e-9 and max(sizes) * 0.75 <= 9 + 1e-9, sizes  # px -> pt
    assert "Relative-based scaling" not in svg  # no in-figure title: a paper has a caption
    assert "Relative-based scaling" in titled.read_text()  # unless asked
    # Log axes name their magnitudes: read as numbers, each axis' rendered labels increase (plotly's
    # own "10⁵, 2, 5, 10⁶" did not: a bare 2 and 5 for 2×10⁵ and 5×10⁵).
    linearised = tmp_path / "linearised.svg"
    viz.save(_linearised_figure(), linearised, size="column")
    for drawn, axes in ((svg, {"x3", "x4", "y", "y2", "y3", "y4"}), (linearised.read_text(), {"x", "y"})):
        ticks = _rendered_ticks(drawn)
        assert axes <= set(ticks), sorted(ticks)
        for axis, values in ticks.items():
            assert len(values) >= 2 and all(b > a for a, b in zip(values, values[1:], strict=False)), (
                axis,
                values,
            )
    assert fig.layout.width == 960  # the figure itself is left as shown on screen


def _linearised_figure():
    from rbplab.study import synthetic_study
    from rbplab.viz import plots

    study = synthetic_study(n_tokens=3000)
    return plots.emergence_linearised(emergence.table(study, [10], [1, 4, 16], corpora=["synthetic-a"]))


def _rendered_ticks(svg: str) -> dict[str, list[float]]:
    """The tick labels of each axis of an exported SVG, as numbers ("2×10<sup>4</sup>", "10⁵")."""
    out: dict[str, list[float]] = {}
    for axis, inner in re.findall(r'<g class="([xy]\d*)tick"><text[^>]*>(.*?)</text>', svg):
        text = re.sub(r'<tspan style="font-size:70%" dy="-0.6em">([^<]*)</tspan>', r"^\1", inner)
        text = re.sub(r"<[^>]+>", "", text).replace("\u200b", "").replace("−", "-").strip()
        m = re.fullmatch(r"(?:([\d.]+)×)?10\^(-?\d+)", text)
        value = float(m[1] or 1) * 10 ** int(m[2]) if m else float(text)
        out.setdefault(axis, []).append(value)
    return out


def test_unknown_size_is_a_one_line_error(tmp_path):
    with pytest.raises(FigureExportError, match="unknown figure size 'a4'; choose from full, column, screen"):
        viz.save(_figure(), tmp_path / "f.json", size="a4")


def test_html_and_json_need_no_browser(tmp_path):
    fig = _figure()
    html = viz.save(fig, tmp_path / "f.html").read_text()
    assert "squares" in html and len(html) > 1_000_000  # plotly.js inlined: opens offline
    assert '<script src="http' not in html and "<script src='http" not in html
    data = json.loads(viz.save(fig, tmp_path / "f.json").read_text())
    assert data["data"][0]["y"] == [1, 4, 9]


def test_bad_requests_are_one_line_errors(tmp_path):
    with pytest.raises(FigureExportError, match=r"cannot tell the format of 'f\.bmp'"):
        viz.save(_figure(), tmp_path / "f.bmp")
    with pytest.raises(FigureExportError, match="unknown figure format 'gif'"):
        check_formats(["png", "gif"])
    assert check_formats([" PNG", "svg "]) == ["png", "svg"]


def test_a_failed_export_leaves_no_file(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the browser crashed")

    monkeypatch.setattr(pio, "write_images", broken)
    monkeypatch.setattr("rbplab.viz.export._require_kaleido", lambda: None)
    with pytest.raises(FigureExportError, match="figure export failed: RuntimeError: the browser crashed"):
        save_many([_figure(), _figure()], [tmp_path / "a.json", tmp_path / "b.png"])
    assert list(tmp_path.iterdir()) == []  # neither the JSON written first nor a temporary remains


def test_missing_chrome_says_how_to_get_it(tmp_path, monkeypatch):
    class ChromeNotFoundError(RuntimeError):
        pass

    def no_chrome(*args, **kwargs):
        raise ChromeNotFoundError("Kaleido v1 and later requires Chrome to be installed.")

    monkeypatch.setattr(pio, "write_images", no_chrome)
    monkeypatch.setattr("rbplab.viz.export._require_kaleido", lambda: None)
    with pytest.raises(FigureExportError, match="needs Chrome or Chromium.*apt-get install chromium"):
        viz.save(_figure(), tmp_path / "f.pdf")


def test_a_figure_read_back_from_json_is_laid_out_for_paper():
    """`rbplab report --figures` exports the figures notebooks saved as JSON, whose arrays come back
    in plotly's typed-array form ({"dtype", "bdata"}): labelling their log axes failed with
    "could not convert string to float: 'dtype'", so the README's report line failed."""
    import json

    from rbplab.study import synthetic_study
    from rbplab.viz import plots
    from rbplab.viz.layout import for_page, paper_page

    study = synthetic_study()
    fig = plots.rbp_vs_size(study.points([1, 10]), size.fits(study, [1, 10]), size.bands(study, [1, 10]))
    read_back = json.loads(fig.to_json())
    assert any("bdata" in str(trace.get("x")) for trace in read_back["data"])  # what a report reads
    page = paper_page("column")
    laid_out, direct = for_page(read_back, page).layout, for_page(fig, page).layout
    assert laid_out.xaxis.tickvals and laid_out.xaxis.tickvals == direct.xaxis.tickvals
    assert laid_out.yaxis.ticktext == direct.yaxis.ticktext
