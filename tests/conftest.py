"""Shared fixtures: the tiny tokenizer, tiny random causal LMs saved as HF directories, a small corpus.

The builders live in `helpers.models` (importable from any test); this file only makes them fixtures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers.models import DOCUMENTS, build_gpt2, build_llama, build_neox, build_tokenizer, write_gguf
from helpers.once import build_once, in_xdist_worker

from rbplab.catalog.corpora import Corpus, Document

pytest_plugins = ["helpers.hub_fixtures"]  # hub-reachability fixtures shared by two test folders

# The test models are tiny: a second thread buys nothing, and on a machine shared with
# other jobs OpenMP's barriers make every parallel op wait for a descheduled thread
# (measured: rank_stats 18x slower with 2 threads on an oversubscribed 2-core machine).
torch.set_num_threads(1)

# Without a GPU the fused head's Triton kernel runs through Triton's interpreter, which is chosen
# when the kernel is defined (rbplab.extraction.fused_head is imported): set before any test does.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist the workers share the cores: a subprocess (a CLI, a notebook's kernel) that
# opens an OpenMP pool as wide as the machine spins against the other workers' (same reason as above).
if in_xdist_worker():
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(path)
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_gpt2(tmp_path_factory.mktemp("gpt2"), tiny_tokenizer)


@pytest.fixture(scope="session")
def neox_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_neox(tmp_path_factory.mktemp("neox"), tiny_tokenizer)


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    return build_llama(tmp_path_factory.mktemp("llama"), tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_corpus() -> Corpus:
    return Corpus(
        name="tiny",
        documents=tuple(Document(i, t) for i, t in DOCUMENTS),
        source={"origin": "tests/conftest.py"},
    )


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory, llama_dir, tiny_tokenizer) -> dict[str, Path]:
    """{"with_tokenizer": file, "bare": file}: the tiny llama as GGUF, each in its own directory."""
    with_tok = tmp_path_factory.mktemp("gguf-tok") / "tiny-llama-f32.gguf"
    bare = tmp_path_factory.mktemp("gguf-bare") / "tiny-llama-f32.gguf"
    return {
        "with_tokenizer": write_gguf(with_tok, llama_dir, tiny_tokenizer),
        "bare": write_gguf(bare, llama_dir),
    }


@pytest.fixture(scope="session")
def hub_template(tmp_path_factory):
    """The hub stand-in (tests/helpers/hub.py), built once per session; use the `hub` fixture."""
    from helpers.hub import build_hub

    return build_once(tmp_path_factory, "hf", lambda folder: build_hub(folder / "hub"))


@pytest.fixture
def hub(hub_template, tmp_path, monkeypatch):
    """A private copy of the hub stand-in as the Hugging Face cache, offline (HF_HUB_OFFLINE=1):
    tests may move its branches or delete its files."""
    import shutil

    import datasets
    from helpers.hub import Hub
    from huggingface_hub import constants

    root = tmp_path / "hf-hub"
    shutil.copytree(hub_template.root, root)
    for name, value in (("HF_HUB_CACHE", str(root)), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    return Hub(root, {repo: dict(branches) for repo, branches in hub_template.commits.items()})


# The e2e suites' expensive inputs, each built once per session (in whatever order, under any -k,
# the first test that asks builds it) and handed to tests as private copies, as `hub` copies
# `hub_template`: scoring the micro-suite takes about a minute on two cores, a copy well under a second.


@pytest.fixture(scope="session")
def micro_cache_template(tmp_path_factory) -> Path:
    """The micro-suite's final models on prose and humaneval and 3 checkpoints per size on prose,
    300 tokens each (helpers.studies.MICRO_*). Read-only: take `micro_cache` or `copy_cache`."""
    from helpers.studies import MICRO_CHECKPOINTS, MICRO_FINALS, micro_present, score

    if not micro_present():
        pytest.skip("the micro-suite's weights are not in data/")
    return build_once(
        tmp_path_factory,
        "micro-cache-template",
        lambda folder: score(folder, MICRO_FINALS, MICRO_CHECKPOINTS),
    )


@pytest.fixture(scope="session")
def micro_cache_wide_template(micro_cache_template, tmp_path_factory) -> Path:
    """`micro_cache_template` plus the final models on every bundled corpus and checkpoints on
    humaneval too (helpers.studies.wide_tables): the runner scores only what the copy lacks."""
    from helpers.studies import copy_cache, score, wide_tables

    return build_once(
        tmp_path_factory,
        "micro-cache-wide",
        lambda folder: score(copy_cache(micro_cache_template, folder / "cache"), *wide_tables()),
    )


def _report_once(
    tmp_path_factory, name: str, cache_template: Path, corpora: list[str], notebooks: tuple[str, ...] = ()
) -> Path:
    """`rbplab report` of the micro-suite on `corpora` (every notebook and PDF figures, or only
    `notebooks` and no figures; n_boot 10) on a copy of `cache_template`, run once per test run:
    the report folder, its cache beside it (`<folder>/../cache`)."""
    from helpers.studies import MICRO_MAX_TOKENS, copy_cache

    from rbplab.grid import Grid
    from rbplab.report import ReportOptions, run_report

    def build(folder: Path) -> Path:
        cache = copy_cache(cache_template, folder / "cache")
        out = folder / "report"
        table = run_report(
            Grid.from_names("micro", corpora, max_tokens=MICRO_MAX_TOKENS),
            out,
            cache_dir=cache,
            parameters={"n_boot": 10},
            options=ReportOptions(figures=() if notebooks else ("pdf",), notebooks=notebooks or None),
            progress=None,
        )
        assert table["ok"].all(), table["error"].tolist()
        return out

    return build_once(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def micro_report_template(micro_cache_wide_template, tmp_path_factory) -> Path:
    """The report of the micro-suite on `MICRO_TWO_CORPORA` (the README's `-c prose humaneval`) on
    `micro_cache_wide_template` (notebook 06 analyses its checkpoints), as `_report_once` writes it:
    for the tests of exported figures and of offline explorers. Read-only."""
    from helpers.studies import MICRO_TWO_CORPORA

    return _report_once(tmp_path_factory, "micro-report", micro_cache_wide_template, list(MICRO_TWO_CORPORA))


@pytest.fixture(scope="session")
def micro_wide_report_template(micro_cache_wide_template, tmp_path_factory) -> Path:
    """The report of the micro-suite on the four bundled corpora (as `make demo` writes it), of the
    notebooks that show explorers, on `micro_cache_wide_template` (its checkpoints are on two
    corpora: notebook 06 falls back to its known law), as `_report_once` writes it. Read-only."""
    from helpers.explorer_clicks import EXPLORER_NOTEBOOKS

    from rbplab.study.loading import default_corpora

    corpora = default_corpora()
    return _report_once(
        tmp_path_factory, "micro-wide-report", micro_cache_wide_template, corpora, EXPLORER_NOTEBOOKS
    )


@pytest.fixture(scope="session")
def micro_prose_report_template(micro_cache_template, tmp_path_factory) -> Path:
    """The report of the micro-suite on prose alone on `micro_cache_template`, as `_report_once`
    writes it: for the tests of exported figures and of what a report's index states. Read-only."""
    return _report_once(tmp_path_factory, "micro-prose-report", micro_cache_template, ["prose"])


@pytest.fixture
def micro_cache(micro_cache_template, tmp_path) -> Path:
    """A private copy of `micro_cache_template`, the test's to write to."""
    from helpers.studies import copy_cache

    return copy_cache(micro_cache_template, tmp_path / "micro-cache")


@pytest.fixture(scope="session")
def demo_checkpoints_template(tmp_path_factory):
    """(cache, table): the demo's own checkpoint scoring step (`score_checkpoints`, the demo's
    revisions) on the bundled corpora at 96 tokens, run once; table is None when the micro-suite's
    checkpoints are not in data/. Read-only: copy the cache (helpers.studies.copy_cache)."""
    from rbplab.catalog import registry
    from rbplab.cli.demo import score_checkpoints
    from rbplab.core.settings import ExtractionSettings
    from rbplab.study.loading import default_corpora

    def build(folder: Path):
        cache = folder / "cache"
        try:
            table = score_checkpoints(
                "micro", default_corpora(), ExtractionSettings(max_tokens=96), cache, {}
            )
        except (registry.UnknownFamilyError, FileNotFoundError):  # the tests skip, naming what is missing
            table = None
        return cache, table

    return build_once(tmp_path_factory, "demo-checkpoints", build)


# Markers that may start Jupyter kernels; `make test-fast` deselects them and must start none.
KERNEL_MARKERS = ("notebook", "browser")
# The kernels started while the current test ran (its module and session fixtures' setup included),
# and whether its markers allow them.
_kernels: dict = {"allowed": True, "started": []}


def pytest_sessionstart(session):
    try:
        from jupyter_client.provisioning import local_provisioner
    except ImportError:  # no notebook extras installed: nothing here can start a kernel
        return
    launch = local_provisioner.launch_kernel

    def record(cmd, **kwargs):
        _kernels["started"].append(cmd)
        return launch(cmd, **kwargs)

    local_provisioner.launch_kernel = record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _kernels["allowed"] = any(item.get_closest_marker(name) for name in KERNEL_MARKERS)
    _kernels["started"] = []
    yield


@pytest.fixture(autouse=True)
def _kernels_only_in_marked_tests(request):
    """A test that starts a Jupyter kernel in this process (or whose module fixture does) without
    a `notebook` or `browser` marker fails, so `make test-fast` stays free of kernels as tests are
    added. Kernels started by a subprocess (a `papermill` command line) are not seen: mark those."""
    yield
    started = [] if _kernels["allowed"] else _kernels["started"]
    assert not started, (
        f"{request.node.nodeid} started {len(started)} Jupyter kernel(s) without a notebook or "
        "browser marker: mark it @pytest.mark.notebook (make test-fast runs no kernel)"
    )


# Under `make test`'s xdist workers (--dist loadscope --no-loadscope-reorder: a module per unit of
# work, each sent to the first worker free, in collection order) the slowest modules go out first,
# slowest first, so that no long one starts last; then the other modules that start kernels,
# browsers, clusters or installs; the many cheap modules fill the end on whichever worker is free.
# SLOWEST is the order benchmarks/suite_figures.py last recorded (setup included), bent where a
# module needs a session fixture another builds: the demo's report leads (its fixtures score the
# micro-suite the later reports copy) while test_readme fills its own cache on the other worker.
SLOWEST = (
    "tests/e2e/test_explorers_every_option.py",
    "tests/e2e/test_readme.py",
    "tests/e2e/test_study_report.py",
    "tests/e2e/test_explorers.py",
    "tests/e2e/test_notebooks.py",
    "tests/e2e/test_report_figures.py",
    "tests/runner/test_ray.py",
    "tests/e2e/test_browser.py",
    "tests/runner/test_gpu_workers.py",
    "tests/viz/test_states.py",
    "tests/e2e/test_notebook_parameters.py",
    "tests/viz/test_widgets.py",
)
HEAVY_MARKERS = ("slow", "notebook", "browser", "ray", "install")


def pytest_collection_modifyitems(config, items):
    missing = [path for path in SLOWEST if not (config.rootpath / path).is_file()]
    if missing:  # a renamed module would silently lose its place
        raise pytest.UsageError(f"tests/conftest.py SLOWEST names modules that do not exist: {missing}")
    if not in_xdist_worker():
        return
    heavy = {item.nodeid.split("::")[0] for item in items if any(map(item.get_closest_marker, HEAVY_MARKERS))}

    def rank(item) -> int:
        module = item.nodeid.split("::")[0]
        return SLOWEST.index(module) if module in SLOWEST else len(SLOWEST) + (module not in heavy)

    items.sort(key=rank)
