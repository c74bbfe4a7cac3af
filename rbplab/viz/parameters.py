"""Notebook parameters as batch runs hand them over, made into the values the notebooks expect.

`papermill -p corpora '["prose","humaneval"]'` passes the text, not a list; `-p corpora prose`
one name; `-y` and `rbplab report --params FILE.yaml` real YAML values. The `as_*` functions
accept all of these (a list, a JSON or YAML list in text, comma-separated names, one name) and
raise a one-line `ParameterError` for anything else, so a batch fails with a sentence instead of
a corpus lookup of '["prose", ...]'. `read_params_file` and `check_names` serve `rbplab report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rbplab.core.errors import RbplabError
from rbplab.core.names import did_you_mean


class ParameterError(RbplabError, ValueError):
    """A notebook parameter that cannot be used as given."""


def _parsed(text: str, name: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = " ".join(str(err).split())
        raise ParameterError(f"parameter {name!r}: cannot read {text!r} ({problem})") from None


def as_names(value: Any, name: str = "value") -> list[str] | None:
    """None, or a list of names from a list, a JSON/YAML list in text ('["a", "b"]'), comma-separated
    text ("a,b") or one name ("a")."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _parsed(text, name)
        elif text.lower() in ("none", "null", ""):
            return None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise ParameterError(
        f'parameter {name!r} must be a list of names, e.g. ["prose", "humaneval"]; got {value!r}'
    )


def as_numbers(value: Any, name: str = "value", kind: type = int) -> list | None:
    """None, or a list of numbers (`kind`) from a list, list text ("[1, 10]") or "1,10"."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("none", "null", ""):
            return None
        value = _parsed(text if text.startswith("[") else f"[{text}]", name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        if kind is int and any(float(v) != int(v) for v in value):
            raise ParameterError(f"parameter {name!r} must hold whole numbers; got {value!r}")
        return [kind(v) for v in value]
    raise ParameterError(f"parameter {name!r} must be a list of numbers, e.g. [1, 10, 100]; got {value!r}")


def as_mapping(value: Any, name: str = "value") -> dict:
    """A dict from a dict, YAML/JSON mapping text ("{max_tokens: 2000}") or None (empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = _parsed(value, name) if value.strip() else {}
        value = {} if value is None else value
    if isinstance(value, Mapping):
        return dict(value)
    raise ParameterError(f"parameter {name!r} must be a mapping, e.g. {{max_tokens: 2000}}; got {value!r}")


def read_params_file(path: str | Path) -> dict[str, Any]:
    """The parameters of a YAML (or JSON) file: one mapping of parameter name to value."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ParameterError(f"cannot read parameters file {path}: {err.strerror or err}") from None
    data = _parsed(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ParameterError(f"{path} must hold one mapping of parameter names to values")
    return dict(data)


def check_names(parameters: Iterable[str], declared: Iterable[str]) -> None:
    """Refuse parameters no notebook declares, naming the closest declared ones."""
    known = sorted(set(declared))
    unknown = [p for p in parameters if p not in known]
    if unknown:
        first = unknown[0]
        raise ParameterError(
            f"no notebook takes parameter {first!r}{did_you_mean(first, known)}"
            + (f" (nor {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else "")
            + f"; parameters: {', '.join(known)}"
        )
