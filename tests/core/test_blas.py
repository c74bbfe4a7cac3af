"""rbplab.core.blas: one OpenBLAS thread inside the block, the previous counts after, same numbers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize  # noqa: F401  (its OpenBLAS must be loaded to be found)

from rbplab.analysis.data_scaling import fit_joint_law
from rbplab.core.blas import _controls, single_blas_thread


def _counts() -> list[int]:
    return [get() for _, get in _controls()]


def test_one_thread_inside_the_previous_counts_after():
    controls = _controls()
    if not controls:
        pytest.skip("no OpenBLAS loaded (another BLAS): single_blas_thread does nothing here")
    for set_threads, _ in controls:
        set_threads(2)
    try:
        assert _counts() == [2] * len(controls)
        with single_blas_thread():
            assert _counts() == [1] * len(controls)
        assert _counts() == [2] * len(controls)
        with pytest.raises(RuntimeError), single_blas_thread():  # restored on an error too
            raise RuntimeError("stop")
        assert _counts() == [2] * len(controls)
    finally:
        for set_threads, _ in controls:
            set_threads(2)


def test_a_joint_law_fit_is_the_same_with_one_thread_or_several():
    rng = np.random.default_rng(3)
    S = np.repeat([2.5e4, 8e4, 2e5, 6e5, 1.2e6, 2.7e6], 5)
    D = np.tile([2e5, 4e5, 8e5, 1.6e6, 3.2e6], 6)
    loss = (0.5 + 40 * S**-0.3 + 300 * D**-0.35) * np.exp(rng.normal(0, 0.01, len(S)))
    controls = _controls()
    if not controls:
        pytest.skip("no OpenBLAS loaded")
    import rbplab.analysis.data_scaling as data_scaling

    unwrapped = data_scaling.fit_joint_law.__wrapped__  # the fit without the thread limit
    for set_threads, _ in controls:
        set_threads(2)
    several = unwrapped(S, D, loss)
    assert fit_joint_law(S, D, loss) == several  # bit for bit: the tables do not change
