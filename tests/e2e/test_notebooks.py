"""Every notebook executes headless (papermill, through `rbplab.report`) on the bundled default
data -- the micro-suite on bundled corpora, extracted for real into a fresh cache -- and its
outputs are checked: the tables have the expected rows and the figures were produced.

Kept small for CI: two corpora, a few thousand tokens per model and corpus. The extraction
notebook runs first and fills the cache; the others then read it without running a model.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rbplab.catalog import registry
from rbplab.grid import Grid
from rbplab.report import ReportOptions, run_report
from rbplab.report.execution import execute_notebook
from rbplab.report.pages import MATHJAX_URL
from rbplab.store.paths import notebooks_dir
from rbplab.study.results import load_results
from rbplab.viz.readable import text_table

MAX_TOKENS = 2000
CORPORA = ["humaneval", "wikipedia"]
# Notebook 06 on the micro-suite's real checkpoints (4 intermediate + final per size), one corpus.
CHECKPOINTS = {
    "families": ["micro"],
    "corpora": ["humaneval"],
    "revisions": "log:5",
    "settings": {"max_tokens": 1000},
}
ORDER = [
    "05_extraction",
    "01_rbp_vs_size",
    "02_k_sweep",
    "03_emergence",
    "04_lognormal",
    "06_training_dynamics",
    "07_beyond_the_paper",
]
PLOTLY = "application/vnd.plotly.v1+json"


def _micro_members() -> pd.DataFrame | None:
    try:
        members = registry.family_models("micro")
    except (registry.UnknownFamilyError, FileNotFoundError):
        return None
    present = members["source"].map(lambda s: Path(registry.source_location(s)).exists())
    return members if present.all() and len(members) >= 2 else None


MEMBERS = _micro_members()


def test_notebooks_are_paired_and_stored_without_outputs() -> None:
    """Each .ipynb is committed clean and says the same as its py:percent twin."""
    import jupytext

    folder = notebooks_dir()
    assert (folder / "jupytext.toml").is_file()
    for name in ORDER:
        nb = jupytext.read(folder / f"{name}.ipynb")
        py = jupytext.read(folder / f"{name}.py")
        assert all(
            not c.get("outputs") and c.get("execution_count") is None
            for c in nb.cells
            if c.cell_type == "code"
        )
        assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in py.cells], (
            name
        )
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{name}: one cell tagged 'parameters'"


def test_parameters_are_typed_for_papermill() -> None:
    """papermill --help-notebook reads each parameter's type (no "Unknown type")."""
    import papermill

    for name in ORDER:
        declared = papermill.inspect_notebook(str(notebooks_dir() / f"{name}.ipynb"))
        untyped = [
            p
            for p, info in declared.items()
            if not info.get("inferred_type_name") or info["inferred_type_name"] == "None"
        ]
        assert not untyped, (name, untyped)
    declared = papermill.inspect_notebook(str(notebooks_dir() / "01_rbp_vs_size.ipynb"))
    assert declared["corpora"]["inferred_type_name"] == "Optional[list[str]]"
    assert declared["ks"]["inferred_type_name"] == "list[int]"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> tuple[pd.DataFrame, Path, list[str]]:
    if MEMBERS is None:
        pytest.skip("the micro-suite family is not registered with its weights in data/ yet")
    from rbplab.runner import run_study

    out = tmp_path_factory.mktemp("reports")
    lines: list[str] = []
    # The checkpoints are scored first, as `make demo` does: analysis notebooks never extract.
    assert run_study(Grid.read(CHECKPOINTS), cache_dir=cache, progress=False).ok
    table = run_report(
        Grid.from_names("micro", CORPORA, max_tokens=MAX_TOKENS),
        out,
        cache_dir=cache,
        extract=True,  # notebook 05 fills the cache (it runs no model unless asked)
        parameters={"n_boot": 20, "progress": False, "ns": [1, 4, 16], "checkpoints": CHECKPOINTS},
        options=ReportOptions(notebooks=tuple(ORDER)),
        progress=lines.append,
    )
    return table, out, lines


def _values(data: list | dict) -> np.ndarray:
    """A trace array from plotly JSON: a list, or plotly's base64 typed array {"bdata", "dtype"}."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
    return np.asarray(data)


def _table(out: Path, notebook: str, name: str) -> pd.DataFrame:
    return pd.read_csv(out / notebook / f"{name}.csv")


def _shown(out: Path, notebook: str) -> list[str]:
    """What the executed notebook displayed: each output's data, as JSON text (not its source)."""
    cells = json.loads((out / f"{notebook}.ipynb").read_text())["cells"]
    return [json.dumps(o.get("data", {})) for c in cells for o in c.get("outputs", [])]


def _plotly_outputs(out: Path, notebook: str) -> list[dict]:
    nb = json.loads((out / f"{notebook}.ipynb").read_text())
    return [
        o["data"][PLOTLY] for c in nb["cells"] for o in c.get("outputs", []) if PLOTLY in o.get("data", {})
    ]


@pytest.mark.slow
@pytest.mark.notebook
def test_every_notebook_ran(run) -> None:
    table, out, lines = run
    failures = table.loc[~table["ok"], ["notebook", "error"]].to_string(index=False)
    assert table["ok"].all(), f"notebooks failed:\n{failures}"
    assert list(table["notebook"]) == ORDER
    assert len([line for line in lines if ": ok in " in line]) == len(ORDER)
    index = (out / "index.html").read_text()
    assert all(f'href="{name}.html"' in index for name in ORDER)


@pytest.mark.slow
@pytest.mark.notebook
def test_index_shows_headline_figures_and_tables(run) -> None:
    table, out, _ = run
    index = (out / "index.html").read_text()
    with_figure = set(table.loc[table["figure"].notna(), "notebook"])
    assert with_figure == {
        "01_rbp_vs_size",
        "02_k_sweep",
        "03_emergence",
        "04_lognormal",
        "06_training_dynamics",
        "07_beyond_the_paper",
    }
    for name in ORDER:
        section = index[index.index(f'<section id="{name}"') :]
        section = section[: section.index("</section>")]
        assert '<table class="dataframe headline">' in section, name
        # As the tables are shown: each estimate with its interval in one column.
        headline = text_table(_table(out, name, "headline"))
        for column in headline.columns:
            assert f'<th title="{column}">' in section, (name, column)  # a readable header, this tooltip
        assert section.count("Plotly.newPlot") == (name in with_figure), name
    # The emergence headline is the view's figure: over the measured sizes (extrapolation is asked for).
    fig = json.loads((out / "03_emergence" / "headline.plotly.json").read_text())
    assert not [t for t in fig["data"] if t.get("meta") == "extrapolation"]
    drawn = [_values(t["x"]).astype(float) for t in fig["data"] if t.get("meta") != "key"]
    assert max(np.nanmax(x) for x in drawn) <= MEMBERS["S"].max() * 1.0001
    # Every notebook states its result in one sentence, on the index and in results.json.
    results = load_results(out / "results.json")
    assert sorted(results.headlines) == sorted(ORDER) and sorted(results.tables) == sorted(ORDER)
    assert results.grid["corpora"] == CORPORA and results.settings["max_tokens"] == MAX_TOKENS
    assert "corpora: null" not in index and "<dt>corpora</dt><dd>humaneval, wikipedia</dd>" in index
    assert results.runs["cache_key"].notna().all()  # each run's entry, found in the fresh cache
    for name in ORDER:
        assert results.headlines[name] and "n/a" not in results.headlines[name], name
    # One plotly.js and one MathJax for the whole report; pages reference them, nothing remote.
    assert [p.name for p in out.rglob("plotly*.js")] == ["plotly.min.js"]
    for page in [out / "index.html"] + [out / f"{name}.html" for name in ORDER]:
        text = page.read_text()
        # A page with an offline explorer holds its precomputed states (01: 123 k x 3 corpus choices).
        assert 'src="plotly.min.js"' in text and len(text) < 5_000_000, page.name
        assert "cdn.plot.ly" not in text and "cdnjs" not in text, page.name
    assert (out / MATHJAX_URL.split("?")[0]).is_file()


@pytest.mark.slow
@pytest.mark.notebook
def test_extraction_filled_the_cache(run) -> None:
    _, out, _ = run
    cache = _table(out, "05_extraction", "cache")
    cache = cache[cache["max_tokens"] == MAX_TOKENS]  # not the checkpoints scored before the report
    assert len(cache) == len(MEMBERS) * len(CORPORA) and cache["complete"].all()
    assert (cache["n_tokens"] == MAX_TOKENS).all()
    assert cache["new"].all()  # the cache started empty
    headline = _table(out, "05_extraction", "headline")
    assert (
        sorted(headline["model"]) == sorted(MEMBERS["model"]) and (headline["corpora"] == len(CORPORA)).all()
    )


@pytest.mark.slow
@pytest.mark.notebook
def test_rbp_vs_size_fits_and_figures(run) -> None:
    _, out, _ = run
    fits = _table(out, "01_rbp_vs_size", "fits")
    assert len(fits) == len(CORPORA) * 4  # corpora x ks (1, 10, 50, 100)
    assert sorted(set(fits["corpus"])) == CORPORA and (fits["n_models"] == len(MEMBERS)).all()
    k1 = fits[fits["k"] == 1]
    assert np.isfinite(k1["alpha"]).all() and k1["r2"].between(0, 1).all()
    runs = _table(out, "01_rbp_vs_size", "runs")
    assert len(runs) == len(MEMBERS) * len(CORPORA) and (runs["n_tokens"] == MAX_TOKENS).all()
    assert len(_table(out, "01_rbp_vs_size", "bootstrap")) > 0
    figures = _plotly_outputs(out, "01_rbp_vs_size")
    assert len(figures) == 4  # Figure 3, Figure 4, the paper's GPT-2 numbers, the k-slider view
    markers = [t for t in figures[0]["data"] if t.get("mode") == "markers"]
    assert len(markers) == len(CORPORA) and all(len(_values(t["y"])) == len(MEMBERS) for t in markers)
    k1_points = runs.sort_values("S").groupby("corpus")["rbp_1"].apply(lambda v: -np.log(v.to_numpy()))
    for trace, corpus in zip(markers, CORPORA, strict=True):  # the figure shows the data
        assert np.allclose(_values(trace["y"]), k1_points[corpus])
    html = (out / "01_rbp_vs_size.html").read_text()
    assert html.count("Plotly.newPlot") == 4 and "alpha_low" in html  # figures and the fit table
    paper = _table(out, "01_rbp_vs_size", "paper_reference_fits").set_index("k")  # the bundled GPT-2 numbers
    assert paper.loc[1, "alpha"] == pytest.approx(0.056, abs=5e-4) and (paper["ties"] == "optimistic").all()
    summary = _table(out, "01_rbp_vs_size", "headline")
    columns = ["family", "corpus", "alpha", "alpha_low", "alpha_high", "r2", "n_models"]
    assert list(summary.columns) == columns and len(summary) == len(CORPORA)


@pytest.mark.slow
@pytest.mark.notebook
def test_k_sweep_covers_the_three_regimes(run) -> None:
    _, out, _ = run
    sweep = _table(out, "02_k_sweep", "ksweep")
    vocab = int(MEMBERS["vocab_size"].min())
    for corpus, part in sweep.groupby("corpus"):
        assert part["k"].min() == 1 and part["k"].max() < vocab, corpus
        assert {"k=1", "moderate", "large"} <= set(part["regime"]), corpus
    assert len(_table(out, "02_k_sweep", "fits_large_k")) == len(CORPORA) * 2
    assert len(_table(out, "02_k_sweep", "ksweep_summary")) == len(CORPORA)
    assert len(_plotly_outputs(out, "02_k_sweep")) == 4  # Figure 6, Figure 5, RBP curves, slider view


@pytest.mark.slow
@pytest.mark.notebook
def test_emergence_tables(run) -> None:
    _, out, _ = run
    em = _table(out, "03_emergence", "emergence")
    assert len(em) == len(MEMBERS) * len(CORPORA) * 3 * 3  # runs x ks x Ns
    assert np.allclose(em["p_pred"], em["rbp"] ** em["N"])
    assert set(_table(out, "03_emergence", "emergence_fits")["N"]) <= {1, 4, 16}
    assert len(_plotly_outputs(out, "03_emergence")) == 3  # sigmoid view, linearised, N-slider view


@pytest.mark.slow
@pytest.mark.notebook
def test_lognormal_tables(run) -> None:
    _, out, _ = run
    ln = _table(out, "04_lognormal", "lognormal")
    assert len(ln) == len(MEMBERS) * len(CORPORA)
    assert np.isfinite(ln[["mu", "sigma", "llr_vs_power_law"]]).all().all() and (ln["sigma"] > 0).all()
    exps = _table(out, "04_lognormal", "ce_exponents")
    assert len(exps) == len(CORPORA) * 2 * 2  # corpora x (empirical, lognormal) x (CE, -log RBP_1)
    assert len(_plotly_outputs(out, "04_lognormal")) == 3  # rank distribution view, mu/sigma, CE


@pytest.mark.slow
@pytest.mark.notebook
def test_beyond_the_paper_tables(run) -> None:
    _, out, _ = run
    dec = _table(out, "07_beyond_the_paper", "decomposition")
    assert len(dec) == len(MEMBERS) * len(CORPORA)
    assert np.allclose(dec["ce"], dec["ee"] + dec["sa"] - dec["conf"], atol=1e-10)
    runs = _table(out, "01_rbp_vs_size", "runs").merge(dec, on=["corpus", "model"], suffixes=("", "_dec"))
    assert np.allclose(runs["ce"], runs["ce_dec"])  # the same CE the size-law notebook reports
    fits = _table(out, "07_beyond_the_paper", "decomposition_fits")
    assert set(fits["metric"]) == {"ce", "ee", "ee_mm", "sa", "conf", "mrr"}
    assert np.isfinite(fits.loc[fits["metric"].isin(["ce", "ee"]), "alpha"]).all()
    boot = _table(out, "07_beyond_the_paper", "decomposition_bootstrap").set_index(["corpus", "metric"])
    ee = fits[fits["metric"] == "ee"].set_index("corpus")["alpha"]
    for corpus in CORPORA:  # the bootstrap's full-data exponent is the fit's; its interval brackets it
        row = boot.loc[(corpus, "ee")]
        assert row["alpha"] == pytest.approx(ee[corpus], rel=1e-9) and row["n_boot_valid"] == 20
        # (2,000 tokens of wikipedia are one document: every resample is the corpus, the interval a point)
        assert row["alpha_boot_low"] - 1e-12 <= row["alpha"] <= row["alpha_boot_high"] + 1e-12
    audit = _table(out, "07_beyond_the_paper", "prediction_audit")
    # per corpus: ks (1, 10, 100) + CE + EE, each with 1 + 2 held-out predictions
    assert len(audit) == len(CORPORA) * 5 * 3 and set(audit["n_holdout"]) == {1, 2}
    assert (audit["covered"] == (audit["interval_units"].abs() <= 1)).all()
    summary = _table(out, "07_beyond_the_paper", "headline")
    assert summary["n"].sum() == len(audit)
    assert len(_plotly_outputs(out, "07_beyond_the_paper")) == 3  # EE/SA/Conf vs S, bars, audit


@pytest.mark.slow
@pytest.mark.notebook
def test_executed_notebooks_can_be_kept(run, tmp_path: Path) -> None:
    """Executed notebooks are ordinary notebooks: small (no widget state) and re-readable. The
    explorers' precomputed states are what they hold most of: notebook 01's k slider x corpus menu
    was ~4.3 MB as nbformat indents it, 5.35 MB since every state carries its own axis ranges and
    each panel its fit note; 6 MB still keeps widget state (tens of MB) out."""
    _, out, _ = run
    for name in ORDER:
        path = out / f"{name}.ipynb"
        assert path.stat().st_size < 6_000_000, name
        shutil.copy(path, tmp_path / path.name)
        assert json.loads((tmp_path / path.name).read_text())["nbformat"] == 4


HEADLINE_06 = ["corpus", "quantity", "alpha", "alpha_low", "alpha_high", "beta", "beta_low", "beta_high"]


def _check_training_tables(tables: Path) -> None:
    headline = pd.read_csv(tables / "headline.csv")
    assert list(headline.columns) == [*HEADLINE_06, "E", "frontier_exponent", "source"]
    assert list(headline["quantity"]) == ["RBP_1", "RBP_100", "CE"]
    assert np.isfinite(headline[[*HEADLINE_06[2:], "frontier_exponent"]]).all().all()
    frontiers = pd.read_csv(tables / "frontiers.csv")
    per_corpus = frontiers.groupby("corpus")["quantity"].agg(list)
    assert all(q == ["RBP_1", "RBP_100"] for q in per_corpus) and (frontiers["reference"] == "CE").all()
    assert np.isfinite(frontiers[["difference", "difference_low", "difference_high"]]).all().all()
    fits = pd.read_csv(tables / "data_fits.csv")
    assert np.isfinite(fits["beta"]).all() and (fits["beta"] > 0).all()
    assert (tables / "headline.plotly.json").is_file()


@pytest.mark.slow
@pytest.mark.notebook
def test_training_notebook_on_a_synthetic_law(tmp_path: Path) -> None:
    """06 headless with synthetic=True: the joint law of a known L(S, D), its tables finite."""
    result = execute_notebook(
        notebooks_dir() / "06_training_dynamics.ipynb", tmp_path, {"synthetic": True, "n_boot": 20}
    )
    assert result.ok, result.error
    _check_training_tables(tmp_path / "06_training_dynamics")
    assert set(pd.read_csv(tmp_path / "06_training_dynamics" / "headline.csv")["source"]) == {"synthetic"}
    executed = (tmp_path / "06_training_dynamics.ipynb").read_text()
    assert "synthetic = True" in executed
    assert any("SYNTHETIC DATA" in text for text in _shown(tmp_path, "06_training_dynamics"))
    assert result.banner.startswith("SYNTHETIC DATA") and result.summary.startswith("SYNTHETIC DATA")
    assert len(_plotly_outputs(tmp_path, "06_training_dynamics")) == 5  # 3 vs D, surface, slider view


@pytest.mark.slow
@pytest.mark.notebook
def test_training_notebook_on_the_micro_checkpoints(run) -> None:
    table, out, _ = run
    assert table.loc[table["notebook"] == "06_training_dynamics", "ok"].item()
    tables = out / "06_training_dynamics"
    _check_training_tables(tables)
    headline = pd.read_csv(tables / "headline.csv")
    assert set(headline["source"]) == {"checkpoints"}
    joint = pd.read_csv(tables / "joint_fits.csv")  # resampled and note live here, not in the headline
    assert set(joint["resampled"]) == {"checkpoints and documents"} and "note" in joint.columns
    checkpoints = _table(out, "06_training_dynamics", "checkpoints")
    assert sorted(set(checkpoints["S"])) == pytest.approx(sorted(set(MEMBERS["S"])))
    assert sorted(set(checkpoints["D"])) == [2048 * s for s in (98, 195, 390, 781, 1562)]
    assert len(checkpoints) == len(MEMBERS) * 5 * 3  # sizes x checkpoints x k
    shown = _shown(out, "06_training_dynamics")
    assert shown and not any("SYNTHETIC DATA" in text for text in shown)  # no fallback banner
    assert not (tables / "banner.txt").exists()


@pytest.mark.slow
@pytest.mark.notebook
def test_training_notebook_falls_back_to_a_known_law_without_checkpoints(tmp_path: Path) -> None:
    if MEMBERS is None:
        pytest.skip("the micro-suite family is not registered with its weights in data/ yet")
    # An empty cache of its own: the default one ($RBPLAB_CACHE or ~/.cache/rbplab) may hold the
    # demo's checkpoints, which 06 would analyse instead of falling back.
    parameters = {"families": ["micro"], "n_boot": 10, "cache_dir": str(tmp_path / "cache")}
    result = execute_notebook(notebooks_dir() / "06_training_dynamics.ipynb", tmp_path, parameters)
    assert result.ok, result.error
    _check_training_tables(tmp_path / "06_training_dynamics")
    notices = [t for t in _shown(tmp_path, "06_training_dynamics") if "SYNTHETIC DATA" in t]
    assert notices and "no study file with checkpoints" in notices[0]
    checkpoints = _table(tmp_path, "06_training_dynamics", "checkpoints")
    assert sorted(set(checkpoints["S"])) == pytest.approx(sorted(set(MEMBERS["S"])))  # the family's sizes


@pytest.mark.slow
@pytest.mark.notebook
def test_papermill_batch_with_list_parameters(run, cache: Path, tmp_path: Path) -> None:
    """The natural papermill command line: a list as -p text, settings as -y YAML."""
    import subprocess
    import sys

    source = notebooks_dir() / "01_rbp_vs_size.ipynb"
    command = [
        sys.executable, "-m", "papermill", str(source), str(tmp_path / "out.ipynb"),
        "-p", "corpora", '["humaneval"]', "-p", "ks", "[1, 10]", "-p", "cache_dir", str(cache),
        "-p", "output_dir", str(tmp_path / "tables"), "-p", "n_boot", "5",
        "-y", f"settings: {{max_tokens: {MAX_TOKENS}}}", "--cwd", str(source.parent),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "tables" / "runs.csv")
    assert set(runs["corpus"]) == {"humaneval"} and len(runs) == len(MEMBERS)
    assert sorted(set(pd.read_csv(tmp_path / "tables" / "fits.csv")["k"])) == [1, 10]
