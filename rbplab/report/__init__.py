"""The notebook report: every notebook executed headless on one grid, published as HTML pages that
open offline, an index.html and a results.json (`rbplab.load_results`).

Notebooks hand their results over with `save_table`, `save_figure`, `headline` and `banner`
(`from rbplab import report`); `run_report` runs them (`rbplab report` on the command line).
Modules: `handoff` (what notebooks call), `execution` (one notebook, headless), `pages` (HTML and
its offline assets), `request` (the grid as the notebooks' parameters, the checkpoints the cache
holds), `folder` (a folder that holds one report), `index_page` (index.html and results.json) and
`run` (`run_report`: all of them in turn).
"""

from rbplab.report.handoff import banner, headline, save_figure, save_table
from rbplab.report.request import cached_checkpoints
from rbplab.report.run import ReportOptions, run_report

__all__ = [
    "ReportOptions",
    "banner",
    "cached_checkpoints",
    "headline",
    "run_report",
    "save_figure",
    "save_table",
]
