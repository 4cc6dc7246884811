"""A machine-local cache of built code objects, keyed by everything that decides their bytes.

Compiling every family for every arch takes about 22 CPU-minutes (11 min at -j 2 on an idle 2-core
machine, shipped and test trees, 2026-12-07); most builds and every `--check` of an unchanged tree
would redo exactly the same work. An entry is found by a key over the tool identities (version lines
and the sha256 of the compiler, assembler, linker and objdump binaries), the recorded flags, the
contents of the bitcode libraries linked in, the source's path and bytes, and the names of the files
in the include directories (a new header could shadow another). It stores the dependency hashes the
compiler reported; a hit needs every one of them unchanged, as ccache's direct mode does. The build
is reproducible, so a hit gives the bytes a compile would give.

Only clang builds are cached (hipcc's headers live in ROCm, outside what the key sees).
Entries live in ``<cache dir>/builds``, or in the folder ``HIPSKINNY_BUILD_CACHE`` names;
``HIPSKINNY_BUILD_CACHE=0`` or ``--no-cache`` turns the cache off. The least recently used
entries beyond `MAX_ENTRIES` are removed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hipskinny.emulator.listing import TABLE_MAGIC

from .toolchain import Toolchain, cache_dir

TABLE_FORMAT = TABLE_MAGIC.decode().strip()     # an entry holds a table of this format

MAX_ENTRIES = 600        # about 3 builds of both trees; an entry is 30 kB to 4 MB


def _root() -> Path | None:
    where = os.environ.get("HIPSKINNY_BUILD_CACHE", "")
    if where == "0":
        return None
    return Path(where) if where else cache_dir() / "builds"


@functools.cache
def _file_sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tool(exe: str | None) -> str:
    if exe is None:
        return "-"
    real = shutil.which(exe) or exe
    return _file_sha(os.path.realpath(real))


def _names_under(repo: Path, rel: str) -> list[str]:
    root = repo / rel
    return sorted(p.relative_to(repo).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def key(tc: Toolchain, repo: Path, source: str, flags: list[str], include_dirs: list[str],
        bitcode: list[Path]) -> str | None:
    """The entry key of one build, or None when this toolchain's builds are not cached."""
    if tc.kind != "clang" or _root() is None:
        return None
    parts: dict[str, Any] = {
        "version": tc.version,
        "table": TABLE_FORMAT,
        "tools": [_tool(t) for t in (tc.compiler, tc.assembler, tc.linker, tc.objdump)],
        "headers": tc.hip_headers,
        "flags": flags,
        "bitcode": [_file_sha(str(p)) for p in bitcode],
        "source": source,
        "source_sha256": hashlib.sha256((repo / source).read_bytes()).hexdigest(),
        "include_files": [_names_under(repo, d) for d in include_dirs],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def fetch(entry_key: str | None, repo: Path, current_sources) -> tuple[bytes, bytes, dict[str, str]] | None:
    """(code object, instruction table, dependency hashes) of a valid entry, or None.

    `current_sources(paths)` hashes the named repo files now; the entry is valid when they all
    still hash as they did when it was built.
    """
    if entry_key is None:
        return None
    root = _root()
    if root is None:
        return None
    folder = root / entry_key
    try:
        meta = json.loads((folder / "meta.json").read_text())
        sources = meta["sources"]
        if current_sources(list(sources)) != sources:
            return None
        hsaco, table = (folder / "code.hsaco").read_bytes(), (folder / "code.itab").read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    if hashlib.sha256(hsaco).hexdigest() != meta.get("sha256") or \
            hashlib.sha256(table).hexdigest() != meta.get("table_sha256"):
        return None          # a damaged entry is rebuilt, never used
    os.utime(folder / "meta.json")
    return hsaco, table, sources


def store(entry_key: str | None, hsaco: bytes, table: bytes, sources: dict[str, str]) -> None:
    """Keep a fresh build; a cache that cannot be written only costs the next build time."""
    root = _root()
    if entry_key is None or root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=root, prefix=".new-"))
        (staging / "code.hsaco").write_bytes(hsaco)
        (staging / "code.itab").write_bytes(table)
        (staging / "meta.json").write_text(json.dumps({
            "sha256": hashlib.sha256(hsaco).hexdigest(),
            "table_sha256": hashlib.sha256(table).hexdigest(),
            "sources": sources,
        }, sort_keys=True))
        final = root / entry_key
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        _evict(root)
    except OSError:
        return


def _evict(root: Path) -> None:
    entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if len(entries) <= MAX_ENTRIES:
        return

    def used(p: Path) -> float:
        try:
            return (p / "meta.json").stat().st_mtime
        except OSError:
            return 0.0
    for old in sorted(entries, key=used)[:len(entries) - MAX_ENTRIES]:
        shutil.rmtree(old, ignore_errors=True)
