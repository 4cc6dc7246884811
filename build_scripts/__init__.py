"""Offline build of hipskinny's code objects: ``python -m build_scripts [--check]``.

Builds the shipped kernels (kernels/ -> hsaco/) and the test kernels (tests/kernels/,
HIP and hand-written assembly -> tests/hsaco/, not package data) in one run.

Modules: `toolchain` (compiler, HIP headers from the pinned triton wheel, oclc
constants, assembler and linker), `compiler` (one source for one arch: compile or
assemble, check, listing; build markers), `manifest` (the manifest.json of each tree),
`cli` (argument parsing, the two trees, parallel build, --check).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# build_scripts imports the package's own code-object reader as `frontend.*`.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
