"""Running a study's grid on one process, many Ray workers, or SLURM array tasks.

The grid comes from `rbplab.grid` (a study file is one in TOML); `units` plans (model, revision,
corpus, shard range) work units from metadata and computes one into the shared cache; `executors`
run units locally or on Ray; `costs` says what a grid will cost before it runs (`rbplab plan`),
from the cost of one token (`cost_model`) and a throughput probe (`probe`); `run` drives it all
with one progress bar and a final table.
"""

from rbplab.runner.executors import RayOptions
from rbplab.runner.run import StudyRun, run_study

__all__ = ["RayOptions", "StudyRun", "run_study"]
