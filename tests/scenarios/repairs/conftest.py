"""The repair corpus runs embedded on the process sandbox (SQLite store)."""

from __future__ import annotations

import pytest


@pytest.fixture
def sandbox_kind() -> str:
    return "process"
