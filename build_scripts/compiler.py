"""Build one kernel source for one arch (compile HIP or assemble), check the result, write its
instruction table (the emulator's view of the machine code, made from ``llvm-objdump -d``).

Build markers: a test kernel that deliberately breaks a shipping rule says so in its
source with a comment line ``// hipskinny-build: allow-scratch`` (``;`` also starts a
comment in assembly). Markers are honoured only where the caller allows them (the test
tree), each one must be needed by the built code object, and unknown ones are errors.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipskinny.arch import ARCHS
from hipskinny.codeobject import CodeObject, CodeObjectError, target_processor
from hipskinny.emulator.listing import table_from_listing

from . import cache
from .manifest import ManifestError, kernel_entry, launch_facts, launch_flags
from .toolchain import Toolchain, ToolchainError

MARKER = "hipskinny-build:"
# What each marker exempts a code object from (see check_code_object).
ALLOWANCES = {"allow-scratch": "scratch (private segment or dynamic stack)", "allow-spills": "register spills"}
_MARKER_LINE = re.compile(r"^\s*(?://|;)\s*hipskinny-build:(?P<what>.*)$", re.MULTILINE)
_INCLUDE = re.compile(r"^\s*\.(?:include|incbin)\b", re.MULTILINE)


class BuildError(Exception):
    """A code object failed to compile or breaks a shipping rule."""


# Assembly test kernels (tests/kernels/asm/<name>.s) are written once for every arch they are
# built for and preprocessed per arch (see asm_targets and preprocess_asm). A target names an
# arch or an ISA family: gfx9 (gfx942, gfx950), gfx11 (gfx1100, gfx1151), gfx12 (gfx1201).
ISA_FAMILIES: dict[str, tuple[str, ...]] = {}
for _arch in ARCHS:
    ISA_FAMILIES.setdefault(_arch[:-2], ())
    ISA_FAMILIES[_arch[:-2]] += (_arch,)
_DIRECTIVE = re.compile(r"^\s*;%(?P<kw>\w*)(?P<rest>.*)$")
_TAG = re.compile(r"^(?P<line>.*?\S)\s*;%(?P<targets>[^;]*)$")


def _archs_of(names: list[str], what: str) -> frozenset[str]:
    """The archs a list of targets (archs or ISA families) names; BuildError naming `what` otherwise."""
    unknown = [n for n in names if n not in ARCHS and n not in ISA_FAMILIES]
    if unknown or not names:
        raise BuildError(f"{what}: targets are archs ({', '.join(ARCHS)}) or ISA families "
                         f"({', '.join(ISA_FAMILIES)}), not {' '.join(unknown) or 'nothing'}")
    return frozenset(a for n in names for a in ISA_FAMILIES.get(n, (n,)))


def asm_targets(text: str, where: str = "") -> tuple[str, ...]:
    """The archs an assembly test kernel is built for: its ``;%targets`` line, else every arch."""
    found = [(number, m.group("rest").split()) for number, line in enumerate(text.split("\n"), 1)
             if (m := _DIRECTIVE.match(line)) and m.group("kw") == "targets"]
    if len(found) > 1:
        raise BuildError(f"{where}:{found[1][0]}: a second ;%targets line")
    if not found:
        return tuple(ARCHS)
    archs = _archs_of(found[0][1], f"{where}:{found[0][0]}: ;%targets")
    return tuple(a for a in ARCHS if a in archs)


def preprocess_asm(text: str, arch: str, where: str = "") -> str:
    """The assembly ``text`` of a test kernel as ``arch`` sees it.

    * ``@ARCH@`` becomes the arch and ``@WAVE@`` its wave size;
    * a line ending in ``;%<target>...`` is kept (without the tag) only for the targets named;
    * ``;%if <target>...`` / ``;%elif <target>...`` / ``;%else`` / ``;%endif`` lines (not nested)
      keep the lines of the first branch whose targets include the arch;
    * the ``;%targets`` line (see asm_targets) is dropped.
    """
    out: list[str] = []
    keep: bool | None = None          # None: outside a conditional
    taken = False                     # a branch of the current conditional was kept
    after_else = False
    wave = str(ARCHS[arch].wave_size)
    for number, line in enumerate(text.split("\n"), 1):
        here = f"{where}:{number}"
        m = _DIRECTIVE.match(line)
        if m is None:
            tag = _TAG.match(line)
            if tag is not None:
                if arch not in _archs_of(tag.group("targets").split(), f"{here}: ;% tag"):
                    continue
                line = tag.group("line")
            if keep is not False:
                out.append(line.replace("@ARCH@", arch).replace("@WAVE@", wave))
            continue
        kw, names = m.group("kw"), m.group("rest").split()
        if kw == "targets":
            continue
        if kw not in ("if", "elif", "else", "endif") or (kw in ("if", "elif")) != bool(names) \
                or (kw == "if") == (keep is not None) or (after_else and kw != "endif"):
            raise BuildError(f"{here}: bad conditional {line.strip()!r} (;%if <target>... / ;%elif "
                             "<target>... / ;%else / ;%endif, not nested)")
        if kw == "endif":
            keep, after_else = None, False
            continue
        if kw == "if":
            taken = False
        keep = not taken and (kw == "else" or arch in _archs_of(names, f"{here}: ;%{kw}"))
        taken, after_else = taken or keep, kw == "else"
    if keep is not None:
        raise BuildError(f"{where}: ;%if without ;%endif")
    return "\n".join(out)


@dataclass(frozen=True)
class Built:
    arch: str
    family: str
    hsaco: Path            # in the build's output dir
    table: Path            # the instruction table (.itab) beside it
    entry: dict[str, Any]  # the manifest entry
    warnings: str          # compiler stderr of a successful compile
    seconds: float
    cached: bool = False   # taken from the build cache (see cache.py), not compiled now


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


def read_markers(text: str) -> frozenset[str]:
    """The allowances a source's ``hipskinny-build:`` comment lines ask for; BuildError on unknown ones."""
    found: set[str] = set()
    for m in _MARKER_LINE.finditer(text):
        words = m.group("what").replace(",", " ").split()
        unknown = [w for w in words if w not in ALLOWANCES]
        if unknown or not words:
            raise BuildError(f"unknown build marker {m.group(0).strip()!r}; known: {', '.join(ALLOWANCES)}")
        found.update(words)
    return frozenset(found)


def check_code_object(co: CodeObject, arch: str, allow: frozenset[str] = frozenset()) -> list[str]:
    """Shipping rules: right target, no spills, no scratch, LDS within the arch limit.

    `allow` exempts from the spill/scratch rules (markers); an allowance nothing needs is
    itself a problem, so markers stay minimal.
    """
    problems = []
    if co.arch != arch or target_processor(co.target) != arch:
        problems.append(f"ELF target is {co.arch} ({co.target}) but the code object is for {arch}")
    if not co.kernels:
        problems.append("no kernels in the code object (are they extern \"C\" __global__?)")
    lds_limit = ARCHS[arch].lds_per_workgroup
    used: set[str] = set()
    for k in co.kernels:
        if k.vgpr_spill_count or k.sgpr_spill_count:
            used.add("allow-spills")
            if "allow-spills" not in allow:
                problems.append(f"{k.name}: spills {k.vgpr_spill_count} VGPRs and {k.sgpr_spill_count} SGPRs")
        if k.private_segment_fixed_size or k.uses_dynamic_stack:
            used.add("allow-scratch")
        if k.private_segment_fixed_size and "allow-scratch" not in allow:
            problems.append(f"{k.name}: uses {k.private_segment_fixed_size} bytes of scratch per work-item")
        if k.uses_dynamic_stack and "allow-scratch" not in allow:
            problems.append(f"{k.name}: uses a dynamic stack (scratch of unknown size)")
        if k.group_segment_fixed_size > lds_limit:
            problems.append(f"{k.name}: static LDS {k.group_segment_fixed_size} bytes exceeds the "
                            f"{arch} limit of {lds_limit}")
    for marker in sorted(allow - used):
        problems.append(f"build marker {marker} is not needed: no kernel uses {ALLOWANCES[marker]}")
    return problems


TABLE_SUFFIX = ".itab"


def write_table(tc: Toolchain, hsaco: Path) -> Path:
    """The instruction table of `hsaco` (from `llvm-objdump -d`), beside it as `<stem>.itab`."""
    # A relative file name with cwd = its folder keeps build paths out of the listing.
    done = subprocess.run([tc.objdump, "-d", hsaco.name], cwd=hsaco.parent, capture_output=True)
    if done.returncode != 0:
        raise BuildError(f"{tc.objdump} -d {hsaco.name} failed:\n{done.stderr.decode(errors='replace')}")
    try:
        data = table_from_listing(done.stdout.decode("utf-8"))
    except ValueError as exc:
        raise BuildError(f"{hsaco.name}: {exc}") from None
    table = hsaco.with_suffix(TABLE_SUFFIX)
    table.write_bytes(data)
    return table


def _from_cache(entry_key: str | None, repo: Path, hsaco: Path) -> dict[str, str] | None:
    """Place a cached build's code object and instruction table at `hsaco`; its dependency hashes,
    or None."""
    hit = cache.fetch(entry_key, repo, lambda paths: source_hashes(repo, paths))
    if hit is None:
        return None
    data, table, sources = hit
    hsaco.write_bytes(data)
    hsaco.with_suffix(TABLE_SUFFIX).write_bytes(table)
    return sources


def _markers_of(repo: Path, source: str, where: str, markers_allowed: bool) -> frozenset[str]:
    try:
        allow = read_markers((repo / source).read_text(errors="replace"))
    except BuildError as exc:
        raise BuildError(f"{where}: {source}: {exc}") from None
    except OSError as exc:
        raise BuildError(f"{where}: cannot read {source}: {exc}") from exc
    if allow and not markers_allowed:
        raise BuildError(f"{where}: {source} has a {MARKER} marker; shipped kernels may not break the rules")
    return allow


def compile_family(tc: Toolchain, repo: Path, arch: str, family: str, out_dir: Path, *,
                   source: str | None = None, markers_allowed: bool = False) -> Built:
    """Build a HIP source (default ``kernels/<family>.hip``) for `arch` into ``out_dir/<arch>/``.

    BuildError on failure.
    """
    start = time.monotonic()
    where = f"{arch}/{family}"
    source = source or f"kernels/{family}.hip"
    allow = _markers_of(repo, source, where, markers_allowed)
    try:
        text = (repo / source).read_text(errors="replace")
        bits = launch_flags(text, f"{where}: {source}"), launch_facts(text, f"{where}: {source}")
    except ManifestError as exc:
        raise BuildError(str(exc)) from None
    arch_dir = out_dir / arch
    arch_dir.mkdir(parents=True, exist_ok=True)
    hsaco = arch_dir / f"{family}.hsaco"
    flags = tc.flags(arch, family)
    # The oclc module is made from the arch and the compiler's data layout, both in the key already
    # (its bitcode also names the temporary file it was assembled from).
    bitcode = [tc.hip_root / "lib" / "ockl.bc", tc.hip_root / "lib" / "ocml.bc"] if tc.hip_root else []
    # Where the compiler looks for headers: the source's folder, then the -I folders of the flags.
    include_dirs = [Path(source).parent.as_posix(), *(flags[i + 1] for i, f in enumerate(flags[:-1]) if f == "-I")]
    entry_key = cache.key(tc, repo, source, flags, include_dirs, bitcode)
    sources = _from_cache(entry_key, repo, hsaco)
    if sources is not None:
        return _finish(tc, arch, family, hsaco, flags, sources, allow, "", start, cached=True, launch=bits)
    depfile = arch_dir / f".{family}.d"
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
    built = _finish(tc, arch, family, hsaco, flags, sources, allow, done.stderr.strip(), start, launch=bits)
    if not built.warnings:        # a build that warned is redone, so the warning is seen again
        cache.store(entry_key, hsaco.read_bytes(), built.table.read_bytes(), sources)
    return built


def assemble(tc: Toolchain, repo: Path, arch: str, name: str, source: str, out_dir: Path, *,
             markers_allowed: bool = True) -> Built:
    """Assemble a self-contained AMDGPU assembly file for `arch` and link it into a code object."""
    start = time.monotonic()
    where = f"{arch}/{name}"
    allow = _markers_of(repo, source, where, markers_allowed)
    if _INCLUDE.search((repo / source).read_text(errors="replace")):
        # The freshness check hashes only the file itself, so it must not pull in others.
        raise BuildError(f"{where}: {source} uses .include/.incbin; assembly test kernels must be self-contained")
    arch_dir = out_dir / arch
    arch_dir.mkdir(parents=True, exist_ok=True)
    hsaco = arch_dir / f"{name}.hsaco"
    entry_key = cache.key(tc, repo, source, tc.asm_flags(arch), [], [])
    sources = _from_cache(entry_key, repo, hsaco)
    if sources is not None:
        return _finish(tc, arch, name, hsaco, tc.asm_flags(arch), sources, allow, "", start, cached=True)
    obj = arch_dir / f".{name}.o"
    text = preprocess_asm((repo / source).read_text(), arch, source)
    assembled = arch_dir / f".{name}.s"       # what llvm-mc reads: this arch's text of the source
    assembled.write_text(text)
    try:
        commands = tc.asm_commands(arch, str(assembled), obj, hsaco)
    except ToolchainError as exc:
        raise BuildError(f"{where}: {exc}") from exc
    warnings = []
    for cmd in commands:
        done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"{where}: {Path(cmd[0]).name} exit {done.returncode}:\n{done.stderr.rstrip()}")
        warnings.append(done.stderr.strip())
    obj.unlink()
    assembled.unlink()
    sources = source_hashes(repo, [source])
    built = _finish(tc, arch, name, hsaco, tc.asm_flags(arch), sources, allow,
                    "\n".join(w for w in warnings if w), start)
    if not built.warnings:
        cache.store(entry_key, hsaco.read_bytes(), built.table.read_bytes(), sources)
    return built


def _finish(tc: Toolchain, arch: str, name: str, hsaco: Path, flags: list[str], sources: dict[str, str],
            allow: frozenset[str], warnings: str, start: float, cached: bool = False,
            launch: tuple[dict[str, int], dict[str, int]] = ({}, {})) -> Built:
    """Check a built code object, write its instruction table (a cached one is already there), make its
    manifest entry."""
    where = f"{arch}/{name}"
    data = hsaco.read_bytes()
    try:
        co = CodeObject.parse(data, f"{where}.hsaco")
    except CodeObjectError as exc:
        raise BuildError(f"{where}: unreadable code object: {exc}") from exc
    problems = check_code_object(co, arch, allow)
    if problems:
        raise BuildError(f"{where}: " + f"\n{where}: ".join(problems))
    table = hsaco.with_suffix(TABLE_SUFFIX) if cached else write_table(tc, hsaco)
    entry = {
        "arch": arch,
        "family": name,
        "path": f"{arch}/{name}.hsaco",
        "sha256": sha256_bytes(data),
        "instructions": f"{arch}/{name}{TABLE_SUFFIX}",
        "instructions_sha256": sha256_bytes(table.read_bytes()),
        "flags": flags,
        "sources": sources,
        "launch_flags": launch[0],
        "launch_facts": launch[1],
        "kernels": sorted((kernel_entry(k, arch, name) for k in co.kernels), key=lambda k: k["name"]),
    }
    return Built(arch, name, hsaco, table, entry, warnings, time.monotonic() - start, cached)
