"""Shared test helpers. The real data lives in ../shared/fixtures beside the checkout (read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"the shared fixtures are missing: expected them at {FIXTURES}")
    return FIXTURES
