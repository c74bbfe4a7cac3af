"""Installed versions of packages, read from their metadata (nothing is imported): what a plan
record and a results file record about the software that made them."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata


def installed_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """Each package's installed version, None for one that is not installed."""
    versions: dict[str, str | None] = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions
