"""Whether every word a PDF draws can be read whole.

A word's box in the PDF's text layer (poppler's `pdftotext -bbox`) does not show a cut: plotly
clips a legend that reaches the figure's edge inside the page, and the clipped words keep their
boxes (or vanish from the text layer altogether). So the page is rendered (`pdftoppm`) and each
word's ink compared with the same figure drawn on a canvas larger to the right and below, its
panels where they were (`extended`): a word whole on the page has the same ink on both, and the
larger canvas shows no ink beyond the page."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DPI = 216
INK = 170  # grey level (0-255) below which a pixel is ink: text is #2a3f5f or #444, grid lines paler
TOOLS = ("pdftotext", "pdftoppm")
WORD = re.compile(r'<word xMin="([-\d.]+)" yMin="([-\d.]+)" xMax="([-\d.]+)" yMax="([-\d.]+)">(.*?)</word>')


def have_poppler() -> bool:
    return all(shutil.which(t) for t in TOOLS)


@dataclass(frozen=True)
class Word:
    text: str
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in points, y down


def words(pdf: Path) -> tuple[list[Word], tuple[float, float]]:
    """The words of a one-page PDF and the page's (width, height) in points."""
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True)
    page = re.search(r'<page width="([\d.]+)" height="([\d.]+)"', out.stdout)
    found = [
        Word(html.unescape(m[5]), (float(m[1]), float(m[2]), float(m[3]), float(m[4])))
        for m in re.finditer(WORD, out.stdout)
    ]
    return found, (float(page[1]), float(page[2]))


def render(pdf: Path) -> np.ndarray:
    """The first page as grey levels (rows x columns, 0 black), at DPI."""
    out = subprocess.run(
        ["pdftoppm", "-r", str(DPI), "-gray", "-singlefile", str(pdf)], capture_output=True, check=True
    ).stdout
    # A binary PGM: "P5", width, height, maximum value, each separated by one whitespace, then bytes.
    header = re.match(rb"P5\s+(\d+)\s+(\d+)\s+(\d+)\s", out)
    width, height = int(header[1]), int(header[2])
    return np.frombuffer(out[header.end() : header.end() + width * height], np.uint8).reshape(height, width)


EXTRA = 120  # px added to the right and below in `extended`
TOLERANCE = 1.0  # points: words and ink extents of the two renderings match within this


def extended(fig: dict) -> dict:
    """`fig` (a laid-out figure's dict) on a canvas EXTRA px wider and higher, its panels and
    legend where they were (the margins right and below grow)."""
    layout = dict(fig["layout"])
    margin = dict(layout.get("margin") or {})
    margin["r"] = (margin.get("r") or 0) + EXTRA
    margin["b"] = (margin.get("b") or 0) + EXTRA
    size = {"width": layout["width"] + EXTRA, "height": layout["height"] + EXTRA}
    return {**fig, "layout": {**layout, **size, "margin": margin}}


def _ink(pixels: np.ndarray, box: tuple[float, ...]) -> tuple[float, float] | None:
    """The top and bottom (in points) of the ink in the columns of `box`, from 2 points above it
    to 2 below (a glyph may reach past the font's box)."""
    scale = DPI / 72
    x0, y0, x1, y1 = (int(max(0.0, v) * scale) for v in (box[0], box[1] - 2, box[2], box[3] + 2))
    rows = np.where((pixels[y0:y1, x0:x1] < INK).any(1))[0]
    return None if not len(rows) else ((y0 + rows[0]) / scale, (y0 + rows[-1]) / scale)


def _at(cols: np.ndarray, rows: np.ndarray) -> str:
    scale = DPI / 72
    return f"({cols.min() / scale:.0f}, {rows.min() / scale:.0f}) pt"


def _fit(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(scale, offset) of the least-squares line a = scale * b + offset through (a, b) pairs."""
    a, b = np.array(pairs).T
    if len(a) < 2 or np.ptp(b) == 0:
        return 1.0, float(np.mean(a - b)) if len(a) else 0.0
    scale, offset = np.polyfit(b, a, 1)
    return float(scale), float(offset)


def cut_words(page: Path, larger: Path) -> list[str]:
    """Each word that is not whole in `page` (an exported PDF) judged against `larger` (the same
    figure exported `extended`), as "word (why)": missing from the page or cut (its ink differs),
    or drawn beyond the page's edge (a cut shows as ink ending higher). Chrome sets the two pages'
    text a fraction of a percent apart, so positions in `larger` are mapped onto `page` by a line
    fitted through the words both share."""
    on_page, (width, height) = words(page)
    drawn, _ = words(larger)
    pixels, reference = render(page), render(larger)
    scale = DPI / 72
    bad = []
    beyond = reference.copy()
    beyond[: int(height * scale) - 1, : int(width * scale) - 1] = 255
    if (beyond < INK).any():
        rows, cols = np.where(beyond < INK)
        bad.append(f"ink beyond the page's edge, from {_at(cols, rows)}")

    edge = np.zeros_like(pixels, dtype=bool)
    edge[-int(scale) - 1 :, :] = edge[:, -int(scale) - 1 :] = True  # the last point below and right
    if (pixels[edge] < INK).any():
        rows, cols = np.where(edge & (pixels < INK))
        bad.append(f"ink on the page's edge (cut there), from {_at(cols, rows)}")

    def near(w: Word, box: tuple[float, ...], slack: float) -> bool:
        return all(abs(a - b) <= slack + 0.02 * b for a, b in zip(w.box, box, strict=True))

    rough = [(w, next(v for v in on_page if v.text == w.text and near(v, w.box, 2))) for w in drawn
             if any(v.text == w.text and near(v, w.box, 2) for v in on_page)]  # fmt: skip
    fx = _fit([(v.box[i], w.box[i]) for w, v in rough for i in (0, 2)])
    fy = _fit([(v.box[i], w.box[i]) for w, v in rough for i in (1, 3)])

    def mapped(box: tuple[float, ...]) -> tuple[float, ...]:
        x0, y0, x1, y1 = box
        return (fx[0] * x0 + fx[1], fy[0] * y0 + fy[1], fx[0] * x1 + fx[1], fy[0] * y1 + fy[1])

    for word in drawn:
        box = mapped(word.box)
        if box[2] > width + TOLERANCE or box[3] > height + TOLERANCE:
            bad.append(f"{word.text} (beyond the page at {word.box})")
            continue
        match = [
            w for w in on_page
            if w.text == word.text and all(abs(a - b) <= TOLERANCE for a, b in zip(w.box, box, strict=True))
        ]  # fmt: skip
        if not match:
            bad.append(f"{word.text} (missing from the page: clipped, at {word.box})")
            continue
        want, got = _ink(reference, word.box), _ink(pixels, match[0].box)
        if want is None or not any(c.isalnum() for c in word.text):
            continue
        want = (fy[0] * want[0] + fy[1], fy[0] * want[1] + fy[1])
        # A cut below (the page's or the legend's edge) ends the ink higher; ink above a word can
        # differ (a faint line crossing a tick label), so only the bottom is compared.
        if got is None or got[1] < want[1] - TOLERANCE:
            shown = "none" if got is None else ", ".join(f"{v:.1f}" for v in got)
            whole = ", ".join(f"{v:.1f}" for v in want)
            bad.append(f"{word.text} (cut: ink at {shown} where whole at {whole})")
    return bad


def invisible_words(pdf: Path) -> list[str]:
    """Each word of `pdf` off its page or without any ink in its box (clipped away whole, as
    plotly clips a legend to a scroll box on both renderings `cut_words` compares)."""
    found, (width, height) = words(pdf)
    pixels = render(pdf)
    bad = []
    for word in found:
        x0, y0, x1, y1 = word.box
        if x0 < -0.5 or y0 < -0.5 or x1 > width + 0.5 or y1 > height + 0.5:
            bad.append(f"{word.text} (beyond the page at {word.box})")
        elif any(c.isalnum() for c in word.text) and _ink(pixels, word.box) is None:
            bad.append(f"{word.text} (no ink: clipped, at {word.box})")
    return bad
