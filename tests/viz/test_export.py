"""rbplab.viz.save: figures as PNG, SVG and PDF through kaleido, HTML and JSON without it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from rbplab import viz
from rbplab.viz.export import FigureExportError, check_formats, save_many

HAS_BROWSER = importlib.util.find_spec("kaleido") is not None and any(
    shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
)


def _figure() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[1, 4, 9], name="squares"))
    fig.update_layout(width=420, height=260, title="exported")
    return fig


@pytest.mark.skipif(not HAS_BROWSER, reason="image export needs kaleido and Chromium (make browser-deps)")
def test_png_svg_pdf(tmp_path):
    fig = _figure()
    paths = save_many([fig] * 3, [tmp_path / "f.png", tmp_path / "f.svg", tmp_path / "f.pdf"])
    png, svg, pdf = (p.read_bytes() for p in paths)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: twice the layout's pixels
    assert (width, height) == (2 * 420, 2 * 260)
    assert svg.lstrip().startswith(b"<svg") and b"exported" in svg
    assert pdf.startswith(b"%PDF-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png", "f.svg"]  # no temporaries


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
