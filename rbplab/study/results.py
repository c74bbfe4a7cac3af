"""One results file per study or report: what was analysed, how, with what software, and every
headline number, as JSON that `load_results` reads back (the role of lm-evaluation-harness's
results file).

The document holds:
  grid       families, corpora, models (with S, and revision/step for checkpoints), ties, level
  settings   the extraction settings the runs were scored with (`ExtractionSettings.to_dict`)
  versions   Python and the packages that made the numbers (read from installed metadata)
  runs       one row per run (`Study.run_table`) and, where known, the cache key of its entry
  tables     named result tables ("fits": `rbplab.study.size.fit_table`; a report adds each notebook's
             headline table), every number as written, NaN as null
  headlines  one sentence per result, with its interval (a report's notebooks)

Cache keys are known when the caller passes them, or when exactly one complete cache entry
matches a run's model, revision and corpus and every setting the caller made explicit; a run
with none or several candidates gets null rather than a guess. The file is written under a
temporary name and renamed, so an interrupted write never leaves a file that reads as complete.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rbplab.core.documents import Fields, ListOf, MapOf, read_json
from rbplab.core.errors import BadFileError, InvalidArgumentError, NotFoundError, RbplabError
from rbplab.core.settings import ExtractionSettings, installed_versions, resolve_settings
from rbplab.study import size

RESULTS_FORMAT = "rbplab-results"
# 2: interval columns are `<q>_low`/`<q>_high` in every table. Version 1 files come only from
# development builds before 0.1.0 (intervals as `alpha_ci_low`, `lo`/`hi`, ...) and are refused.
RESULTS_VERSION = 2
# A results file holds a study's tables and headlines: a few MB at most. The bound keeps /dev/zero
# or a multi-GB file from being read whole.
MAX_RESULTS_FILE_BYTES = 256 << 20
_TABLE = Fields({"columns": ListOf(str), "rows": ListOf(list)}, required=("columns", "rows"))
RESULTS_SHAPE = Fields(
    {
        "format": str,
        "version": int,
        "created": str,
        "grid": dict,
        "settings": (dict, type(None)),
        "versions": MapOf((str, type(None))),
        "runs": _TABLE,
        "tables": MapOf(_TABLE),
        "headlines": MapOf(str),
    }
)
VERSIONED_PACKAGES = (
    "rbplab",
    "numpy",
    "pandas",
    "scipy",
    "pyarrow",
    "torch",
    "transformers",
    "tokenizers",
    "plotly",
    "papermill",
)


class ResultsError(RbplabError, ValueError):
    """A results file that cannot be read: not JSON, not rbplab's, or of another format version."""


@dataclass(frozen=True)
class Results:
    """A results file read back (`load_results`)."""

    created: str
    grid: dict
    settings: dict | None
    versions: dict
    runs: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    headlines: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    def table(self, name: str) -> pd.DataFrame:
        """One named table; the error lists the names the file has."""
        if name not in self.tables:
            raise NotFoundError(f"no table {name!r} in these results; they have {sorted(self.tables)}")
        return self.tables[name]


def package_versions(packages: Sequence[str] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Python, the platform and each package's installed version (None when not installed),
    from package metadata: nothing is imported."""
    return {"python": sys.version.split()[0], "platform": platform.platform(), **installed_versions(packages)}


def _plain(value: Any) -> Any:
    """A JSON value: numpy scalars as Python numbers, NaN and NA as null, timestamps as ISO text."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    return value


def table_json(frame: pd.DataFrame) -> dict:
    """A table as {"columns": [...], "rows": [[...], ...]}: column order and every value kept."""
    return {
        "columns": [str(c) for c in frame.columns],
        "rows": [[_plain(v) for v in row] for row in frame.itertuples(index=False, name=None)],
    }


def table_frame(data: Mapping) -> pd.DataFrame:
    """A table read back, its columns as written."""
    try:
        return pd.DataFrame(list(data["rows"]), columns=list(data["columns"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ResultsError(f"a table in the results file is malformed ({err})") from None


def results_document(
    *,
    grid: Mapping[str, Any],
    settings: ExtractionSettings | Mapping[str, Any] | None,
    runs: pd.DataFrame | None = None,
    tables: Mapping[str, pd.DataFrame] | None = None,
    headlines: Mapping[str, str] | None = None,
) -> dict:
    """The JSON document (module docstring) from its parts."""
    if isinstance(settings, ExtractionSettings):
        settings = settings.to_dict()
    return {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "grid": _plain(dict(grid)),
        "settings": _plain(dict(settings)) if settings is not None else None,
        "versions": package_versions(),
        "runs": table_json(runs if runs is not None else pd.DataFrame()),
        "tables": {str(name): table_json(frame) for name, frame in (tables or {}).items()},
        "headlines": {str(k): str(v) for k, v in (headlines or {}).items()},
    }


def write_results(path: str | Path, document: Mapping) -> Path:
    """Write a results document as JSON (strict: no NaN), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def study_grid(study) -> dict:
    """What a study covers: families, corpora, models (family, model, S, and checkpoints' revision
    and step), tie convention and interval level."""
    models = study.models[["family", "model", "S"]]
    if study.has_training:
        training = study.run_table()[["family", "model", "revision", "step"]].drop_duplicates(
            ["family", "model"]
        )
        models = models.merge(training, on=["family", "model"], how="left")
    return {
        "families": study.families,
        "corpora": study.corpora,
        "models": table_json(models),
        "ties": study.ties,
        "level": study.level,
    }


def matching_keys(
    runs: pd.DataFrame,
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
) -> list[str | None]:
    """For each run (columns model, corpus and, for checkpoints, revision) the key of the one
    complete cache entry with that model, revision and corpus that agrees with `settings`
    (its max_tokens, and its context_length when one is set; no filter when settings is None);
    None when no entry or several match."""
    from rbplab.store.cache.admin import list_entries

    entries = list_entries(cache_dir)
    entries = entries[entries["complete"]]
    if settings is not None:
        resolved = resolve_settings(settings)
        # No cap is a setting too (the full corpus); a context length left to the model is not
        # comparable without the model's maximum, so only an explicit one narrows the match.
        cap = entries["max_tokens"]
        entries = entries[cap.isna() if resolved.max_tokens is None else cap == resolved.max_tokens]
        if resolved.context_length is not None:
            entries = entries[entries["context_length"] == resolved.context_length]
    keys = []
    for row in runs.to_dict("records"):
        revision = row.get("revision")
        revision = None if revision is None or pd.isna(revision) else revision
        model = str(row["model"])
        if revision and model.endswith(f"@{revision}"):
            model = model[: -len(revision) - 1]
        same = entries[
            (entries["model"] == model)
            & (entries["corpus"] == row["corpus"])
            & (entries["revision"].isna() if revision is None else entries["revision"] == revision)
        ]
        keys.append(str(same["key"].iloc[0]) if len(same) == 1 else None)
    return keys


def save_results(
    study,
    path: str | Path,
    *,
    ks: Iterable[int] | int = (1, 10, 100),
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    keys: Sequence[str | None] | None = None,
    tables: Mapping[str, pd.DataFrame] | None = None,
    headlines: Mapping[str, str] | None = None,
    find_keys: bool = True,
) -> Path:
    """Write `study`'s results file: its grid, `settings`, package versions, its runs with their
    cache keys (`keys`, one per `Study.run_table` row, else `matching_keys` in `cache_dir` unless
    `find_keys` is False), the fits at `ks` (table "fits": `size.fit_table`) and any further
    `tables` and `headlines`. Returns the path; `load_results` reads it back."""
    runs = study.run_table()
    if keys is not None:
        if len(keys) != len(runs):
            raise InvalidArgumentError(f"{len(keys)} keys for {len(runs)} runs")
        runs = runs.assign(cache_key=list(keys))
    elif find_keys:
        runs = runs.assign(cache_key=matching_keys(runs, settings, cache_dir))
    document = results_document(
        grid=study_grid(study),
        settings=resolve_settings(settings) if settings is not None else None,
        runs=runs,
        tables={"fits": size.fit_table(study, [int(k) for k in np.atleast_1d(ks)]), **dict(tables or {})},
        headlines=headlines,
    )
    return write_results(path, document)


def load_results(path: str | Path) -> Results:
    """A results file (`save_results`, `rbplab report`'s results.json) read back: grid, settings,
    versions, runs and tables as DataFrames, headline sentences."""
    path = Path(path)
    try:
        data = read_json(path, "results file", MAX_RESULTS_FILE_BYTES, shape=RESULTS_SHAPE)
    except FileNotFoundError:
        raise ResultsError(f"cannot read results file {path}: it does not exist") from None
    except OSError as err:
        raise ResultsError(f"cannot read results file {path}: {err.strerror or err}") from None
    except BadFileError as err:
        raise ResultsError(str(err)) from None
    if data.get("format") != RESULTS_FORMAT:
        raise ResultsError(f'{path} is not an rbplab results file (no "format": "{RESULTS_FORMAT}")')
    version = data.get("version")
    if not isinstance(version, int) or version > RESULTS_VERSION:
        raise ResultsError(
            f"{path} is results format version {version!r}; this rbplab reads up to {RESULTS_VERSION}"
        )
    if version < RESULTS_VERSION:
        raise ResultsError(
            f"{path} is results format version {version}, written by a development build before 0.1.0 "
            f"(its interval columns have former names); this rbplab reads version {RESULTS_VERSION}: "
            "write it again with save_results or rbplab report"
        )
    tables = data.get("tables") or {}
    return Results(
        created=str(data.get("created", "")),
        grid=dict(data.get("grid") or {}),
        settings=data.get("settings"),
        versions=dict(data.get("versions") or {}),
        runs=table_frame(data.get("runs") or {"columns": [], "rows": []}),
        tables={name: table_frame(table) for name, table in tables.items()},
        headlines={str(k): str(v) for k, v in (data.get("headlines") or {}).items()},
        path=path,
    )
