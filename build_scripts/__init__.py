"""Offline build of hipskinny's code objects: ``python -m build_scripts [--check]``.

Modules: `toolchain` (compiler, HIP headers from the pinned triton wheel, oclc
constants), `compiler` (one family for one arch: compile, check, listing),
`manifest` (hsaco/manifest.json), `cli` (argument parsing, parallel build, --check).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# build_scripts imports the package's own code-object reader as `frontend.*`.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
