"""Compile one kernel family for one arch, check the result, write its listing."""

from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frontend.arch import ARCHS
from frontend.codeobject import CodeObject, CodeObjectError, target_processor

from .manifest import kernel_entry
from .toolchain import Toolchain


class BuildError(Exception):
    """A code object failed to compile or breaks a shipping rule."""


@dataclass(frozen=True)
class Built:
    arch: str
    family: str
    hsaco: Path            # in the build's output dir
    listing: Path
    entry: dict[str, Any]  # the manifest entry
    warnings: str          # compiler stderr of a successful compile
    seconds: float


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_depfile(text: str) -> list[str]:
    """Prerequisites of a Make-style dependency file (one target)."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    _target, sep, rest = text.partition(": ")
    if not sep:
        return []
    deps: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(rest):
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] in " #\\":
            current.append(rest[i + 1])
            i += 2
            continue
        if c == "$" and rest[i + 1:i + 2] == "$":
            current.append("$")
            i += 2
            continue
        if c.isspace():
            if current:
                deps.append("".join(current))
                current = []
        else:
            current.append(c)
        i += 1
    if current:
        deps.append("".join(current))
    return deps


def source_hashes(repo: Path, deps: list[str]) -> dict[str, str]:
    """{repo-relative posix path: sha256} of the dependencies inside the repo."""
    root = repo.resolve()
    out: dict[str, str] = {}
    for dep in deps:
        path = (root / dep).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            continue
        out[path.relative_to(root).as_posix()] = sha256_bytes(path.read_bytes())
    return dict(sorted(out.items()))


def check_code_object(co: CodeObject, arch: str) -> list[str]:
    """Shipping rules: right target, no spills, no scratch, LDS within the arch limit."""
    problems = []
    if co.arch != arch or target_processor(co.target) != arch:
        problems.append(f"ELF target is {co.arch} ({co.target}) but the code object is for {arch}")
    if not co.kernels:
        problems.append("no kernels in the code object (are they extern \"C\" __global__?)")
    lds_limit = ARCHS[arch].lds_per_workgroup
    for k in co.kernels:
        if k.vgpr_spill_count or k.sgpr_spill_count:
            problems.append(f"{k.name}: spills {k.vgpr_spill_count} VGPRs and {k.sgpr_spill_count} SGPRs")
        if k.private_segment_fixed_size:
            problems.append(f"{k.name}: uses {k.private_segment_fixed_size} bytes of scratch per work-item")
        if k.uses_dynamic_stack:
            problems.append(f"{k.name}: uses a dynamic stack (scratch of unknown size)")
        if k.group_segment_fixed_size > lds_limit:
            problems.append(f"{k.name}: static LDS {k.group_segment_fixed_size} bytes exceeds the "
                            f"{arch} limit of {lds_limit}")
    return problems


def gzip_bytes(data: bytes) -> bytes:
    """Reproducible gzip: no file name, mtime 0."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def write_listing(tc: Toolchain, hsaco: Path) -> Path:
    """`llvm-objdump -d` of `hsaco`, gzipped beside it as `<stem>.lst.gz`."""
    # A relative file name with cwd = its folder keeps build paths out of the listing.
    done = subprocess.run([tc.objdump, "-d", hsaco.name], cwd=hsaco.parent, capture_output=True)
    if done.returncode != 0:
        raise BuildError(f"{tc.objdump} -d {hsaco.name} failed:\n{done.stderr.decode(errors='replace')}")
    listing = hsaco.with_suffix(".lst.gz")
    listing.write_bytes(gzip_bytes(done.stdout))
    return listing


def compile_family(tc: Toolchain, repo: Path, arch: str, family: str, out_dir: Path) -> Built:
    """Build ``kernels/<family>.hip`` for `arch` into ``out_dir/<arch>/``; BuildError on failure."""
    start = time.monotonic()
    where = f"{arch}/{family}"
    arch_dir = out_dir / arch
    arch_dir.mkdir(parents=True, exist_ok=True)
    hsaco = arch_dir / f"{family}.hsaco"
    depfile = arch_dir / f".{family}.d"
    source = f"kernels/{family}.hip"
    # cwd = repo and relative paths: nothing in the output depends on where the repo is.
    done = subprocess.run(tc.command(arch, family, source, hsaco, depfile), cwd=repo,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{where}: compiler exit {done.returncode}:\n{done.stderr.rstrip()}")
    try:
        deps = parse_depfile(depfile.read_text())
    except OSError as exc:
        raise BuildError(f"{where}: the compiler wrote no dependency file: {exc}") from exc
    depfile.unlink()
    sources = source_hashes(repo, deps)
    if source not in sources:
        raise BuildError(f"{where}: dependency output does not list {source}: {deps}")
    data = hsaco.read_bytes()
    try:
        co = CodeObject.parse(data, f"{where}.hsaco")
    except CodeObjectError as exc:
        raise BuildError(f"{where}: unreadable code object: {exc}") from exc
    problems = check_code_object(co, arch)
    if problems:
        raise BuildError(f"{where}: " + f"\n{where}: ".join(problems))
    listing = write_listing(tc, hsaco)
    entry = {
        "arch": arch,
        "family": family,
        "path": f"{arch}/{family}.hsaco",
        "sha256": sha256_bytes(data),
        "listing": f"{arch}/{family}.lst.gz",
        "listing_sha256": sha256_bytes(listing.read_bytes()),
        "flags": tc.flags(arch, family),
        "sources": sources,
        "kernels": sorted((kernel_entry(k, arch, family) for k in co.kernels), key=lambda k: k["name"]),
    }
    return Built(arch, family, hsaco, listing, entry, done.stderr.strip(), time.monotonic() - start)
