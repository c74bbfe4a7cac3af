"""`rbplab report --figures pdf`: every figure a report exports is whole on its page, for one corpus
and for several. Each PDF is rendered and every word compared with the same figure drawn on a
larger canvas (`helpers.pdf_text`): 3 of 18 PDFs cut their legend at its descenders (4 with one
corpus), which the words' boxes alone do not show. Each PDF also names its corpus and its models
(a paper figure has no title)."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.io as pio
import pytest
from helpers.browser import INSTALL, needs_kaleido
from helpers.pdf_text import cut_words, extended, have_poppler, invisible_words, words
from helpers.studies import MICRO_TWO_CORPORA

from rbplab.viz.layout import for_page, paper_page

CASES = {"one corpus": ["prose"], "two corpora": list(MICRO_TWO_CORPORA)}

pytestmark = [
    pytest.mark.slow,  # the session's reports execute every notebook twice; ~70 PDFs rendered
    pytest.mark.notebook,
    pytest.mark.browser,  # kaleido exports through Chromium
    needs_kaleido,
    pytest.mark.skipif(not have_poppler(), reason=f"needs poppler-utils: {INSTALL}"),
]


@pytest.fixture(scope="module")
def reports(micro_prose_report_template: Path, micro_report_template: Path) -> dict[str, Path]:
    """The demo's grid, small, reported with --figures pdf on one corpus and on both (the
    session's reports of the micro-suite: its final models on the corpora reported, and three
    checkpoints of each size)."""
    return {"one corpus": micro_prose_report_template, "two corpora": micro_report_template}


@pytest.fixture(scope="module")
def larger(reports: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """Each exported PDF's figure, laid out as the export lays it out, on a larger canvas."""
    pdfs, figures, paths = [], [], []
    folder = tmp_path_factory.mktemp("larger")
    for case, root in reports.items():
        for pdf in sorted((root / "figures").rglob("*.pdf")):
            source = root / pdf.parent.name / f"{pdf.stem}.plotly.json"
            fig = extended(for_page(json.loads(source.read_text()), paper_page("full")).to_dict())
            pdfs.append(pdf)
            figures.append(fig)
            paths.append(folder / f"{case.replace(' ', '-')}-{pdf.parent.name}-{pdf.name}")
    pio.write_images(
        figures,
        paths,
        format=["pdf"] * len(paths),
        width=[f["layout"]["width"] for f in figures],
        height=[f["layout"]["height"] for f in figures],
    )
    return dict(zip(pdfs, paths, strict=True))


@pytest.mark.parametrize("case", list(CASES))
def test_every_exported_figure_is_whole_on_its_page(reports, larger, case):
    pdfs = sorted((reports[case] / "figures").rglob("*.pdf"))
    assert len(pdfs) >= 17, [p.name for p in pdfs]  # every figure the notebooks save, once
    cut = {
        f"{pdf.parent.name}/{pdf.name}": bad
        for pdf in pdfs
        if (bad := cut_words(pdf, larger[pdf]) + invisible_words(pdf))
    }
    assert not cut, cut


@pytest.mark.parametrize("case", list(CASES))
def test_every_exported_figure_names_its_corpus_and_models(reports, case):
    """No title on a paper figure: its legend, panel titles or caption name what it shows."""
    unnamed = {}
    for pdf in sorted((reports[case] / "figures").rglob("*.pdf")):
        text = {w.text.strip("(),;:") for w in words(pdf)[0]}
        # The paper's own GPT-2 figure names its corpus, Wikipedia; notebook 06 falls back to
        # checkpoints drawn from a known law ("known law · synthetic") where the cache holds none
        # on every corpus of the grid.
        corpus = text & {*CASES[case], "Wikipedia", "known"}
        models = bool(text & {"micro", "GPT-2", "synthetic"}) or any(w.startswith("micro-") for w in text)
        if not corpus or not models:
            unnamed[f"{pdf.parent.name}/{pdf.name}"] = sorted(text)[:40]
    assert not unnamed, unnamed
