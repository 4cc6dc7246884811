"""Offline build of hipskinny's code objects: ``python -m build_scripts [--check]``.

Builds the shipped kernels (kernels/ -> hsaco/) and the test kernels (tests/kernels/,
HIP and hand-written assembly -> tests/hsaco/, not package data) in one run.

Modules: `toolchain` (compiler, HIP headers from the pinned triton wheel, oclc
constants, assembler and linker), `compiler` (one source for one arch: compile or
assemble, check, instruction table; build markers), `manifest` (the manifest.json of each tree),
`cli` (argument parsing, the two trees, parallel build, --check).

They import the package's arch table and code-object reader as `hipskinny` (never by its source
folder's name, `frontend`): importing build_scripts makes that name this checkout's package
(see `_use_tree`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FRONTEND = REPO_ROOT / "frontend"     # the package `hipskinny` (pyproject's package-dir)


def _sources(package: Path) -> dict[str, bytes]:
    """The contents of a copy of the package's Python files by relative path (an installed copy's hsaco/,
    the code objects, left out)."""
    out = {}
    for p in package.rglob("*.py"):
        rel = p.relative_to(package)
        if "__pycache__" not in rel.parts and rel.parts[0] != "hsaco":
            out[rel.as_posix()] = p.read_bytes()
    return out


def _differences(package: Path) -> list[str]:
    """The Python files in which the copy of hipskinny at `package` differs from this checkout's frontend/."""
    if package.resolve() == FRONTEND.resolve():
        return []
    theirs, mine = _sources(package), _sources(FRONTEND)
    return sorted(rel for rel in theirs.keys() | mine.keys() if theirs.get(rel) != mine.get(rel))


def _load(name: str, where: Path) -> None:
    spec = importlib.util.spec_from_file_location(name, where / "__init__.py", submodule_search_locations=[str(where)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def _use_tree() -> None:
    """Make ``import hipskinny`` give this checkout's package, the one source of the arch table and the
    code-object reader the build uses, under the package's one name (issue 55: imported as `frontend`
    too, a process held two copies: two ``ARCHS``, two ``CodeObjectError`` classes, two import hooks).

    The `hipskinny` the process imports is used if it is this checkout's frontend/ (an editable install)
    or an identical copy (``pip install .`` of this tree, as CI runs ``python -m build_scripts --check``);
    otherwise frontend/ (and hsaco/) are loaded as `hipskinny`, unless the process already imported
    another copy: then the build refuses to run on it.
    """
    loaded = sys.modules.get("hipskinny")
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        where = Path(file).parent if file else None
        differ = _differences(where) if where else ["__init__.py"]
        if differ:
            shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
            raise ImportError(
                f"build_scripts: this process imported hipskinny from {where or loaded!r}, which is not this "
                f"checkout's {FRONTEND} nor a copy of it (they differ in {shown}); the build reads the arch table "
                "and code-object reader of the tree it builds. Import build_scripts before hipskinny, run "
                "`python -m build_scripts` in a process of its own, or reinstall (`pip install -e .`).")
        return
    spec = importlib.util.find_spec("hipskinny")
    if spec is not None and spec.origin and not _differences(Path(spec.origin).parent):
        return      # imported by name, as everything else does
    _load("hipskinny", FRONTEND)
    hsaco = REPO_ROOT / "hsaco"
    if (hsaco / "__init__.py").is_file():    # outside frontend/: the package's code objects, as installed
        _load("hipskinny.hsaco", hsaco)
        sys.modules["hipskinny"].hsaco = sys.modules["hipskinny.hsaco"]  # type: ignore[attr-defined]


_use_tree()
