"""Where the test suite and the repository are (test files live in one folder per family)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
