"""Where the test suite and the repository are (test files live in one folder per family), and
`importable`, which puts every test folder on ``sys.path``: some test modules hold helpers that
other families' tests and the fake-runtime scenarios import by module name."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FOLDERS = tuple(sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))))


def folders() -> list[str]:
    """The suite's folder and every test folder (what a subprocess's PYTHONPATH should add)."""
    return [str(TESTS), *(str(p) for p in FOLDERS)]


def importable() -> None:
    """Add `folders` to ``sys.path`` (once each)."""
    for p in folders():
        if p not in sys.path:
            sys.path.append(p)
