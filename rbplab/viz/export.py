"""Figures as files for papers and slides: PNG, SVG, PDF (and JPEG, WebP) through kaleido, or
HTML and plotly JSON without it.

`save(fig, path)` writes one figure, `save_many` several at once (kaleido starts one headless
browser per call, so a batch pays for it once). The format is the file's suffix. A figure is
written as a paper figure by default: `size="full"` (7 in wide, a page's text width) or
`size="column"` (3.5 in), text at 8-9 pt, laid out again for that width
(`rbplab.viz.layout.for_page`), without its in-figure title unless `title=True` (a paper has a
caption); `size="screen"` writes it as shown on screen (960 px). Image export
needs the `export` extra (``pip install 'rbplab[export]'``: kaleido) and a Chrome or Chromium on
the machine (Debian: ``apt-get install chromium``, or ``make browser-deps``); either missing is a
one-line `FigureExportError` that says how to get it. Each file is written under a temporary name
and renamed, so a failed export never leaves a file that looks finished.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from rbplab.core.errors import InvalidArgumentError, RbplabError

IMAGE_FORMATS = ("png", "svg", "pdf", "jpeg", "jpg", "webp")
OTHER_FORMATS = ("html", "json")
FORMATS = IMAGE_FORMATS + OTHER_FORMATS
PNG_SCALE = 2  # a screen figure's raster at twice its pixels: sharp on high-DPI screens
PAPER_DPI = 300  # a paper figure's raster, at print resolution
SIZES = ("full", "column", "screen")


class FigureExportError(RbplabError, RuntimeError):
    """A figure cannot be written as asked (unknown format, kaleido or Chrome missing)."""


def _format(path: Path) -> str:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise FigureExportError(
            f"cannot tell the format of {path.name!r} from its suffix; use one of: "
            + ", ".join(f".{f}" for f in FORMATS)
        )
    return "jpeg" if fmt == "jpg" else fmt


def check_formats(formats: Sequence[str]) -> list[str]:
    """`formats` (e.g. "png,svg,pdf" split) lower-cased and checked, before any notebook runs."""
    out = []
    for fmt in formats:
        fmt = fmt.strip().lower().lstrip(".")
        if fmt not in FORMATS:
            raise FigureExportError(f"unknown figure format {fmt!r}; choose from {', '.join(FORMATS)}")
        out.append(fmt)
    if any(f in IMAGE_FORMATS for f in out):
        _require_kaleido()
    return out


def _require_kaleido() -> None:
    if importlib.util.find_spec("kaleido") is None:
        raise FigureExportError(
            "exporting figures as images needs kaleido: pip install 'rbplab[export]' (or pip install kaleido)"
        )


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def save(
    fig, path: str | Path, *, size: str = "full", title: bool = False, scale: float | None = None
) -> Path:
    """Write `fig` (a plotly Figure, FigureWidget or its JSON dict) to `path`; the suffix says how
    (.png .svg .pdf .jpeg .webp through kaleido; .html opens offline with plotly.js inlined; .json
    is plotly's). `size`: "full" (7 in wide) or "column" (3.5 in) paper figures with 8-9 pt text,
    titled only with `title`, rasters at 300 dpi; "screen": the figure as shown, rasters at twice
    its pixels. `scale` overrides the raster scale. Returns the path."""
    return save_many([fig], [path], size=size, title=title, scale=scale)[0]


def check_size(size: str) -> str:
    """`size` checked: one of SIZES (a one-line error names them)."""
    if size not in SIZES:
        raise FigureExportError(f"unknown figure size {size!r}; choose from {', '.join(SIZES)}")
    return size


def save_many(
    figs: Sequence,
    paths: Sequence[str | Path],
    *,
    size: str = "full",
    title: bool = False,
    scale: float | None = None,
) -> list[Path]:
    """`save` for several figures, images rendered in one kaleido session."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from rbplab.viz.layout import PX_PER_INCH, for_page, paper_page

    if len(figs) != len(paths):
        raise InvalidArgumentError(f"{len(figs)} figures but {len(paths)} paths")
    check_size(size)
    if size == "screen":
        figures = [go.Figure(f) for f in figs]
        raster = PNG_SCALE
    else:
        page = paper_page(size, titled=title)
        figures = [for_page(f, page) for f in figs]
        raster = PAPER_DPI / PX_PER_INCH
    targets = [Path(p) for p in paths]
    formats = [_format(p) for p in targets]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    temporaries = [_temporary(t) for t in targets]
    images = [i for i, f in enumerate(formats) if f in IMAGE_FORMATS]
    try:
        for i, (fig, fmt, tmp) in enumerate(zip(figures, formats, temporaries, strict=True)):
            if fmt == "html":
                tmp.write_text(pio.to_html(fig, include_plotlyjs=True, full_html=True), encoding="utf-8")
            elif fmt == "json":
                tmp.write_text(fig.to_json(), encoding="utf-8")
            elif i not in images:
                raise AssertionError(fmt)
        if images:
            _require_kaleido()
            try:
                pio.write_images(
                    [figures[i] for i in images],
                    [temporaries[i] for i in images],
                    format=[formats[i] for i in images],
                    scale=[
                        scale
                        if scale is not None
                        else (raster if formats[i] in ("png", "jpeg", "webp") else 1)
                        for i in images
                    ],
                    width=[figures[i].layout.width for i in images],
                    height=[figures[i].layout.height for i in images],
                )
            except Exception as err:  # kaleido and choreographer raise their own types
                raise _export_error(err) from err
        for tmp, target in zip(temporaries, targets, strict=True):
            os.replace(tmp, target)
    finally:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
    return targets


def _export_error(err: BaseException) -> FigureExportError:
    text = " ".join(str(err).split())
    if (
        type(err).__name__ == "ChromeNotFoundError"
        or "chrome" in text.lower()
        and "not found" in text.lower()
    ):
        return FigureExportError(
            "exporting figures as images needs Chrome or Chromium, and none was found: "
            "apt-get install chromium (make browser-deps), or set BROWSER_PATH to a Chrome binary"
        )
    return FigureExportError(f"figure export failed: {type(err).__name__}: {text}")
