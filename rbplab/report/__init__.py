"""The notebook report: every notebook executed headless on one grid, published as HTML pages that
open offline, an index.html and a results.json (`rbplab.load_results`).

Notebooks hand their results over with `save_table`, `save_figure`, `headline` and `banner`
(`from rbplab import report`); `run_report` runs them (`rbplab report` on the command line).
Modules: `handoff` (what notebooks call), `execution` (one notebook, headless), `pages` (HTML and
its offline assets), `index` (index.html, results.json), `request` (the grid as the notebooks'
parameters), `checkpoints` (the training checkpoints the cache holds), `run` (`run_report`).
"""

from rbplab.report.handoff import banner, headline, save_figure, save_table
from rbplab.report.run import ReportOptions, run_report

__all__ = ["ReportOptions", "banner", "headline", "run_report", "save_figure", "save_table"]
