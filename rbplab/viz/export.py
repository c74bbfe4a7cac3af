"""Figures as files for papers and slides: PNG, SVG, PDF (and JPEG, WebP) through kaleido, or
HTML and plotly JSON without it.

`save(fig, path)` writes one figure, `save_many` several at once (kaleido starts one headless
browser per call, so a batch pays for it once). The format is the file's suffix. Image export
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
PNG_SCALE = 2  # raster exports at twice the layout's pixels: sharp in print and on high-DPI screens


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


def save(fig, path: str | Path, *, scale: float | None = None) -> Path:
    """Write `fig` (a plotly Figure, FigureWidget or its JSON dict) to `path`; the suffix says how
    (.png .svg .pdf .jpeg .webp through kaleido at the figure's own width and height, PNG at
    twice its pixels unless `scale` says otherwise; .html opens offline with plotly.js inlined;
    .json is plotly's). Returns the path."""
    return save_many([fig], [path], scale=scale)[0]


def save_many(figs: Sequence, paths: Sequence[str | Path], *, scale: float | None = None) -> list[Path]:
    """`save` for several figures, images rendered in one kaleido session."""
    import plotly.graph_objects as go
    import plotly.io as pio

    if len(figs) != len(paths):
        raise InvalidArgumentError(f"{len(figs)} figures but {len(paths)} paths")
    figures = [go.Figure(f) for f in figs]
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
                        scale if scale is not None else (PNG_SCALE if formats[i] == "png" else 1)
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
