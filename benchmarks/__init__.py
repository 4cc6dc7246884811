"""hipskinny's performance report (``python -m benchmarks.report``); see README.md.

The report measures the source tree it lives in: when run from a checkout, `hipskinny`
is imported from ``frontend/`` and its code objects from ``hsaco/`` (an installed copy
may be older than the tree being measured).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, where: Path) -> None:
    spec = importlib.util.spec_from_file_location(name, where / "__init__.py", submodule_search_locations=[str(where)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _use_tree() -> None:
    """Import `hipskinny` from this tree, or from the tree ``HIPSKINNY_TREE`` names (how
    `emulator_rate` runs a baseline commit's emulator on the same launches)."""
    root = Path(os.environ.get("HIPSKINNY_TREE") or ROOT)
    front, hsaco = root / "frontend", root / "hsaco"
    if "hipskinny" in sys.modules or not (front / "__init__.py").is_file() or not (hsaco / "__init__.py").is_file():
        return
    _load("hipskinny.hsaco", hsaco)     # lives outside frontend/: registered before the package needs it
    _load("hipskinny", front)
    sys.modules["hipskinny"].hsaco = sys.modules["hipskinny.hsaco"]  # type: ignore[attr-defined]


_use_tree()
