"""Chromium for every test that drives a browser: where it is, its one set of flags, and how a
test opens it (Playwright) or knows that kaleido can export through it.

Playwright drives the system chromium (Debian's; `playwright install` is never needed), always
through `chromium()`, so every browser test runs the same binary with the same flags. kaleido
finds the same binary itself; `needs_kaleido` skips a test where it cannot.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Debian's name first; the others are what kaleido also accepts.
NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _find() -> str | None:
    found = next((path for path in map(shutil.which, NAMES) if path), None)
    # Some CI shells drop /usr/bin from PATH; Debian's package installs there.
    return found or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


CHROMIUM = _find()
# Headless, and as root in a container (--no-sandbox); nothing that reaches out: no sync, no
# component or background updates, no QUIC probes. A test that must see no request leave the
# machine also routes every non-file URL to an abort (`offline_context`).
FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
INSTALL = "make browser-deps (apt-get install chromium poppler-utils)"

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=f"chromium not installed: {INSTALL}")
HAS_KALEIDO = importlib.util.find_spec("kaleido") is not None and CHROMIUM is not None
needs_kaleido = pytest.mark.skipif(
    not HAS_KALEIDO, reason=f"image export needs kaleido and Chromium: {INSTALL}"
)


@contextmanager
def chromium() -> Iterator:
    """A headless chromium (a Playwright `Browser`) with `FLAGS`, closed afterwards. Each
    `browser.new_context()` is a fresh profile: no cookies, storage or settings carried over."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(FLAGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()


def offline_context(browser, viewport: dict, remote: list[str]):
    """A context of `browser` that serves file: URLs and refuses every other request, recording
    its URL in `remote` (what an offline page must never ask for)."""
    context = browser.new_context(viewport=viewport)

    def route(r) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return context


def record_errors(page, errors: list[str], label: str | None = None) -> None:
    """Append each console error and uncaught exception of `page` to `errors`, each after
    `label` (by default the page's URL when it happened)."""

    def add(text: str) -> None:
        errors.append(f"{page.url if label is None else label}: {text}")

    page.on("console", lambda message: message.type == "error" and add(message.text))
    page.on("pageerror", lambda error: add(str(error)))
