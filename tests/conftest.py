"""Shared pytest fixtures: the shared corpus; quiet TF logs.

Markers (`slow`) and the per-test timeout are configured in pyproject.toml.
"""

import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data():
    """The shared review corpora folder; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"shared review corpora not found at {SHARED_DATA} (only "
            "present beside a development checkout)"
        )
    return SHARED_DATA
