"""The runner tests' study file."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.studies import write_study


@pytest.fixture
def study_path(tmp_path, gpt2_dir, neox_dir, llama_dir) -> Path:
    return write_study(tmp_path, gpt2_dir, neox_dir, llama_dir)
