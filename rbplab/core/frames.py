"""`Table`: the DataFrame rbplab's tables are returned as, so that the column names of the last
release still answer for one release.

Every interval is now spelled ``<quantity>_low`` / ``<quantity>_high`` (``alpha_low``,
``neg_log_rbp_high``, ``estimate_low`` ...). Code written against the old names (``alpha_ci_low``,
``neg_log_rbp_lo``, ``lo``, ``ci_low`` ...) keeps working: ``table["alpha_ci_low"]`` returns the
``alpha_low`` column with a FutureWarning naming the new name. Only reading by ``[]`` is served;
the old names are not columns, so they are never displayed, saved or compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

# old name -> new name; the old names go in the release after next
DEPRECATED_COLUMNS: dict[str, str] = {
    "alpha_ci_low": "alpha_low",
    "alpha_ci_high": "alpha_high",
    "beta_ci_low": "beta_low",
    "beta_ci_high": "beta_high",
    "neg_log_rbp_lo": "neg_log_rbp_low",
    "neg_log_rbp_hi": "neg_log_rbp_high",
    "lo": "fit_low",
    "hi": "fit_high",
    "ci_low": "estimate_low",
    "ci_high": "estimate_high",
    "mu_ci_low": "mu_low",
    "mu_ci_high": "mu_high",
    "sigma_ci_low": "sigma_low",
    "sigma_ci_high": "sigma_high",
    "mu_over_sigma_ci_low": "mu_over_sigma_low",
    "mu_over_sigma_ci_high": "mu_over_sigma_high",
    "loss_pred_low": "loss_predicted_low",
    "loss_pred_high": "loss_predicted_high",
}


class Table(pd.DataFrame):
    """A DataFrame that still answers to the deprecated column names (see the module docstring)."""

    @property
    def _constructor(self) -> type[Table]:
        return Table

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            key = self._current(key)
        elif isinstance(key, list) and any(isinstance(k, str) and k in DEPRECATED_COLUMNS for k in key):
            key = [self._current(k) if isinstance(k, str) else k for k in key]
        return super().__getitem__(key)

    def _current(self, name: str) -> str:
        new = DEPRECATED_COLUMNS.get(name)
        if new is None or name in self.columns or new not in self.columns:
            return name
        warnings.warn(
            f"column {name!r} is now {new!r}; the old name goes in the next release",
            FutureWarning,
            stacklevel=3,
        )
        return new


def as_table(frame: pd.DataFrame) -> Table:
    """`frame` as a Table (no copy of its data)."""
    return frame if isinstance(frame, Table) else Table(frame, copy=False)


def renamed_columns(frame: pd.DataFrame) -> Table:
    """`frame` with any deprecated column names replaced by the current ones (a table read from a
    file an older release wrote), as a Table. An old name is renamed only where the table has the
    quantity it bounds (`fit` for `lo`, `estimate` for `ci_low`): a headline table of a report may
    have a column of its own called `lo` or `hi`."""
    old = {
        c: new
        for c in frame.columns
        if (new := DEPRECATED_COLUMNS.get(c)) is not None
        and new not in frame.columns
        and new.rsplit("_", 1)[0] in frame.columns
    }
    return as_table(frame.rename(columns=old) if old else frame)
