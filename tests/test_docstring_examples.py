"""The examples in the docstrings of the public entry points run and print what they say.

Each entry point below must keep at least one example: removing one fails this test."""

from __future__ import annotations

import doctest
import importlib

import pytest

DOCUMENTED = {
    "rbplab.study.study": ["Study.points"],
    "rbplab.study.synthetic": ["synthetic_study"],
    "rbplab.study.size": ["fits", "bands", "ksweep"],
    "rbplab.study.emergence": ["table"],
    "rbplab.study.distribution": ["lognormal"],
    "rbplab.study.decomposition": ["metric_table"],
    "rbplab.study.tables": ["to_markdown"],
    "rbplab.analysis.fit": ["fit_power_law", "scaling_fits"],
    "rbplab.analysis.emergence": ["sequence_law"],
    "rbplab.grid": ["Grid.from_names"],
    "rbplab.core.settings": ["ExtractionSettings"],
    "rbplab.viz.plots.size": ["rbp_vs_size"],
    "rbplab.core.display": ["number"],
    "rbplab.viz.readable": ["text_table"],
}


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_docstring_examples_run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    tests = {t.name.removeprefix(module_name + "."): t for t in finder.find(module) if t.examples}
    missing = [name for name in DOCUMENTED[module_name] if name not in tests]
    assert not missing, f"no docstring example for {missing} in {module_name}"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests.values():
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {module_name} failed"
