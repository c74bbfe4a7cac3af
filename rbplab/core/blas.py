"""One BLAS thread while many tiny problems are solved, e.g. thousands of 5-parameter L-BFGS fits.

scipy's L-BFGS-B calls LAPACK on 5 x 5 matrices at every step; a multi-threaded OpenBLAS wakes its
threads for each call, which on a busy 2-core machine made every step ~30x slower (a joint-law
fit 10 s instead of 0.4 s) while computing the same numbers: matrices this small are never split
between threads. `single_blas_thread()` sets every OpenBLAS loaded in the process (numpy's and
scipy's bundle their own) to one thread and restores the previous counts afterwards. Where no
OpenBLAS can be found (another BLAS, another platform) it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator
from pathlib import Path

# OpenBLAS' thread-count functions under the names its builds export (plain, 64-bit integer
# interface, and scipy-openblas' prefixed builds).
_SYMBOLS = [
    (f"{prefix}openblas_set_num_threads{suffix}", f"{prefix}openblas_get_num_threads{suffix}")
    for prefix in ("", "scipy_")
    for suffix in ("", "64_", "_64")
]


@functools.cache
def _controls() -> tuple[tuple[ctypes._CFuncPtr, ctypes._CFuncPtr], ...]:
    """(set, get) of every OpenBLAS mapped into this process (read from /proc/self/maps)."""
    maps = Path("/proc/self/maps")
    if not maps.is_file():
        return ()
    paths = sorted(
        {
            line.split()[-1]
            for line in maps.read_text().splitlines()
            if "openblas" in line.lower() and "/" in line
        }
    )
    controls = []
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SYMBOLS:
            setter, getter = getattr(library, set_name, None), getattr(library, get_name, None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                controls.append((setter, getter))
                break
    return tuple(controls)


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Run the block with one OpenBLAS thread (numpy and scipy must be imported first)."""
    controls = _controls()
    before = [get() for _, get in controls]
    for set_threads, _ in controls:
        set_threads(1)
    try:
        yield
    finally:
        for (set_threads, _), count in zip(controls, before, strict=True):
            set_threads(count)
