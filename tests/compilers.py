"""Which compiler the tests that build code objects can use: any supported one (ROCm's hipcc, or
clang++-22) for building, exactly the one ``hsaco/manifest.json`` records for byte-for-byte rebuilds.
Without one, those tests are reported as skipped with the reason (the committed trees are still
checked by their hashes; `.ci/run` installs clang-22 and rebuilds everything)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))   # build_scripts is a repo tool, not part of the package

from build_scripts.toolchain import ToolchainError, detect_compiler  # noqa: E402


def _reasons() -> tuple[str, str]:
    """(why no compiler is usable, or "";  why the recorded one is not, or "")."""
    recorded = json.loads((REPO / "hsaco" / "manifest.json").read_text())["compiler"]
    try:
        kind, _exe, version = detect_compiler()
    except ToolchainError as exc:
        return f"no compiler here ({exc})", f"no compiler here, not {recorded.get('version')!r}"
    if (kind, version) != (recorded.get("kind"), recorded.get("version")):
        return "", (f"the compiler here ({version!r}, {kind}) is not the one hsaco/manifest.json records "
                    f"({recorded.get('version')!r}); the committed trees are checked by their hashes instead")
    return "", ""


NO_COMPILER, NOT_RECORDED = _reasons()
needs_compiler = pytest.mark.skipif(bool(NO_COMPILER), reason=f"builds code objects: {NO_COMPILER}")
needs_recorded_compiler = pytest.mark.skipif(bool(NOT_RECORDED), reason=f"rebuilds and compares bytes: {NOT_RECORDED}")
