"""Interactive views: ipywidgets controls driving a plotly FigureWidget, one module per view:
`scaling` (`ScalingView`), `emergence` (`EmergenceView`), `ksweep` (`KSweepView`),
`distribution` (`RankDistributionView`) and `training` (`TrainingView`); `base` holds what
they share: the view classes, the corpus and k controls, and what reaches the front end
(`live_frontend`, `show`, `sync_figure`).

Each view holds one or more `Study` objects (per family) whose RBP curves are
precomputed, so a callback only looks values up, refits a handful of points and
copies the new traces into the live figure: no ranks are recomputed and dragging a
slider stays smooth. Callbacks are plain methods (`set_k`, `set_n`, `set_corpus`,
`set_family`) so tests and scripts can drive a view without a browser.

Every view draws its figure with one function, `state(**values)` (one value per control):
a slider move calls it for the new value. Executed headless (papermill, nbconvert) nobody
renders widgets, and an executed notebook stores no widget state, so a view then holds a plain
plotly Figure (same callbacks, no front end) and displays its offline explorer
(`rbplab.viz.states`): the same `state` over every value of its controls, switched by plotly
sliders and dropdowns that work in the report page without a kernel. `show()` displays figures
that never change.
"""

from rbplab.viz.widgets.base import show
from rbplab.viz.widgets.distribution import RankDistributionView
from rbplab.viz.widgets.emergence import EmergenceView
from rbplab.viz.widgets.ksweep import KSweepView
from rbplab.viz.widgets.scaling import ScalingView
from rbplab.viz.widgets.training import TrainingView

__all__ = ["EmergenceView", "KSweepView", "RankDistributionView", "ScalingView", "TrainingView", "show"]
