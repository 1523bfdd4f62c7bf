"""Fixtures shared by the worker's integration tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users can traverse (pytest's own tmp directories are private), for
    tests whose jobs or checks run as another user."""
    path = Path(tempfile.mkdtemp(prefix="hadar-worker-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
