"""``python -m build_scripts``: build hsaco/ (and tests/hsaco/) from the sources, or check they are fresh.

Two trees, built and checked by the same run:

* shipped: ``kernels/<family>.hip`` -> ``hsaco/<arch>/<family>.hsaco`` + ``.itab``, ``hsaco/manifest.json``
  (package data);
* tests: ``tests/kernels/<name>.hip`` for every arch, and hand-written assembly
  ``tests/kernels/asm/<name>.s`` for every arch its ``;%targets`` line names (default all),
  preprocessed per arch (see ``compiler.preprocess_asm``) ->
  ``tests/hsaco/<arch>/<name>.hsaco`` + ``.itab``, ``tests/hsaco/manifest.json`` (same schema; the
  ``family`` field holds the test kernel's name). Not package data.

Both obey the same rules (no spills, no scratch, LDS within the arch limit); only a test
kernel may opt out, with a ``// hipskinny-build: allow-scratch`` line (see compiler.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipskinny.arch import ARCHS

from . import REPO_ROOT
from .compiler import BuildError, Built, asm_targets, assemble, compile_family, sha256_bytes
from .manifest import ManifestError, compose, dumps, load
from .toolchain import Toolchain, ToolchainError, detect_compiler, find_toolchain

_ASM_NAME = re.compile(r"[A-Za-z0-9_]+\.s")


class SourceError(Exception):
    """A source tree holds a file the build cannot place (a badly named assembly file)."""


@dataclass(frozen=True)
class Tree:
    """A source directory and the artifact directory built from it."""

    src: str          # repo-relative: kernels/ or tests/kernels/
    out: str          # hsaco/ or tests/hsaco/
    package: bool     # package data: needs an __init__.py for editable installs
    test: bool        # test tree: assembly kernels and build markers allowed

    def label(self, key: str) -> str:
        """How messages name one code object: ``hsaco/gfx942/gemv``."""
        return f"{self.out}/{key}"


SHIPPED = Tree("kernels", "hsaco", package=True, test=False)
TESTS = Tree("tests/kernels", "tests/hsaco", package=False, test=True)
TREES = (SHIPPED, TESTS)


@dataclass(frozen=True)
class Job:
    """One code object to build: a source for one arch."""

    tree: Tree
    arch: str
    name: str
    source: str       # repo-relative posix path

    @property
    def key(self) -> str:
        return f"{self.arch}/{self.name}"

    @property
    def label(self) -> str:
        return self.tree.label(self.key)

    @property
    def is_asm(self) -> bool:
        return self.source.endswith(".s")

    def flags(self, kind: str) -> list[str]:
        flags_of = Toolchain(kind, "", "", "", None, None)
        return flags_of.asm_flags(self.arch) if self.is_asm else flags_of.flags(self.arch, self.name)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m build_scripts",
        description="Compile kernels/*.hip (and the test kernels in tests/kernels/) for every shipped arch into "
                    "hsaco/ (and tests/hsaco/), or check that they are fresh.")
    p.add_argument("--check", action="store_true",
                   help="verify hsaco/ and tests/hsaco/ match the sources (rebuild and compare bytes when the "
                        "manifest's compiler is available, otherwise compare source hashes); exit 1 if stale")
    p.add_argument("--no-rebuild", action="store_true",
                   help="with --check: compare source hashes only, even if the compiler is available")
    p.add_argument("--arch", action="extend", nargs="+", default=[], metavar="A",
                   help=f"only these archs (default: all of {', '.join(ARCHS)})")
    p.add_argument("--family", action="extend", nargs="+", default=[], metavar="F",
                   help="only these kernel families (kernels/<F>.hip) or test kernels (tests/kernels/<F>.hip, "
                        "tests/kernels/asm/<F>.s); default: all")
    p.add_argument("-j", "--jobs", type=int, default=2, metavar="N",
                   help="code objects built in parallel (default 2)")
    p.add_argument("--no-cache", action="store_true",
                   help="compile everything, ignoring the machine's build cache (HIPSKINNY_BUILD_CACHE=0)")
    return p


def families_in(repo: Path) -> list[str]:
    return sorted(p.stem for p in (repo / "kernels").glob("*.hip"))


def jobs_in(repo: Path, tree: Tree, archs: list[str] | None = None) -> list[Job]:
    """Every (arch, source) of `tree`, for `archs` (default: all); SourceError on a misnamed file."""
    archs = list(ARCHS) if archs is None else archs
    src = repo / tree.src
    jobs = [Job(tree, arch, p.stem, f"{tree.src}/{p.name}") for p in sorted(src.glob("*.hip")) for arch in archs]
    if tree.test:
        hip_names = {p.stem for p in src.glob("*.hip")}
        for p in sorted((src / "asm").glob("*.s")):
            source = f"{tree.src}/asm/{p.name}"
            if _ASM_NAME.fullmatch(p.name) is None:
                raise SourceError(f"{source}: assembly kernels are named <name>.s (letters, digits, _); "
                                  "a ;%targets line picks the archs")
            if p.stem in hip_names:
                raise SourceError(f"{source}: {tree.src}/{p.stem}.hip has the same name")
            try:
                targets = asm_targets(p.read_text(errors="replace"), source)
            except BuildError as exc:
                raise SourceError(str(exc)) from None
            jobs += [Job(tree, arch, p.stem, source) for arch in targets if arch in archs]
    return sorted(jobs, key=lambda j: (list(ARCHS).index(j.arch), j.name))


def build_one(tc: Toolchain, repo: Path, job: Job, out_dir: Path) -> Built:
    dest = out_dir / job.tree.out
    if job.is_asm:
        return assemble(tc, repo, job.arch, job.name, job.source, dest, markers_allowed=job.tree.test)
    return compile_family(tc, repo, job.arch, job.name, dest, source=job.source, markers_allowed=job.tree.test)


def compile_all(tc: Toolchain, repo: Path, archs: list[str], families: list[str], out_dir: Path,
                jobs: int) -> tuple[dict[str, Built], list[str]]:
    """Build every (arch, shipped family) into ``out_dir/hsaco/<arch>/``. Returns (built by key, errors)."""
    todo = [Job(SHIPPED, arch, family, f"{SHIPPED.src}/{family}.hip") for arch in archs for family in families]
    results, errors = build_jobs(tc, repo, todo, out_dir, jobs)
    return {job.key: b for job, b in results.items()}, errors


def build_jobs(tc: Toolchain, repo: Path, jobs: list[Job], out_dir: Path,
               workers: int) -> tuple[dict[Job, Built], list[str]]:
    """Build every job into ``out_dir/<tree.out>/<arch>/``, `workers` at a time. Returns (built, errors).

    The largest builds start first, so one big family does not finish alone at the end.
    """
    def one(job: Job) -> tuple[Job, Built | None, str]:
        try:
            b = build_one(tc, repo, job, out_dir)
        except BuildError as exc:
            return job, None, f"{job.tree.out}/{exc}"
        how = "from the build cache" if b.cached else f"{b.seconds:.1f} s"
        print(f"  {job.label}: {len(b.entry['kernels'])} kernels, {how}", flush=True)
        if b.warnings:
            print(f"  {job.label}: compiler warnings:\n{b.warnings}", file=sys.stderr, flush=True)
        return job, b, ""

    kernels = _kernel_counts(repo, {j.tree for j in jobs})
    largest_first = sorted(jobs, key=lambda j: (kernels.get((j.tree, j.key), 0), (repo / j.source).stat().st_size),
                           reverse=True)
    results: dict[Job, Built] = {}
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for job, b, error in pool.map(one, largest_first):
            if b is None:
                errors.append(error)
            else:
                results[job] = b
    cached = sum(b.cached for b in results.values())
    if cached:
        print(f"  {cached} of {len(jobs)} code objects came from the build cache "
              "(same tools, flags and sources; --no-cache compiles them all)", flush=True)
    return results, errors


def _kernel_counts(repo: Path, trees: set[Tree]) -> dict[tuple[Tree, str], int]:
    """Kernels per code object in the trees' manifests: what a job's compile time follows (its
    template instances)."""
    out: dict[tuple[Tree, str], int] = {}
    for tree in trees:
        try:
            manifest = load(repo / tree.out / "manifest.json") or {}
        except ManifestError:
            continue
        out.update(((tree, key), len(e.get("kernels", ()))) for key, e in manifest.get("code_objects", {}).items())
    return out


def compiler_record(tc: Toolchain) -> dict[str, str]:
    return {"kind": tc.kind, "version": tc.version, "hip_headers": tc.hip_headers}


def build(repo: Path, jobs_by_tree: dict[Tree, list[Job]], archs: list[str] | None, names: list[str] | None,
          workers: int) -> int:
    """Build the jobs and install them; `archs`/`names` is the scope of this build (None: all).

    Manifest entries outside the scope are kept; those inside it that were not built (their
    source is gone) are removed with their files.
    """
    all_jobs = [j for jobs in jobs_by_tree.values() for j in jobs]
    olds = {tree: load(repo / tree.out / "manifest.json") for tree in jobs_by_tree}
    # The temp dir sits in the repo so the final os.replace calls stay on one filesystem.
    with tempfile.TemporaryDirectory(dir=repo, prefix=".hsaco-build-") as tmp:
        tc = find_toolchain(Path(tmp))
        n_tests = len({j.name for j in jobs_by_tree.get(TESTS, [])})
        n_families = len({j.name for j in jobs_by_tree.get(SHIPPED, [])})
        print(f"building {n_families} families and {n_tests} test kernels x {len({j.arch for j in all_jobs})} "
              f"archs with {tc.version} ({tc.kind})", flush=True)
        results, errors = build_jobs(tc, repo, all_jobs, Path(tmp) / "out", workers)
        if errors:
            print("\n".join(["BUILD FAILED:", *errors, "hsaco/ and tests/hsaco/ were left unchanged."]),
                  file=sys.stderr)
            return 1
        written = []
        for tree, jobs in jobs_by_tree.items():
            built = {j.key: results[j] for j in jobs}
            if not built and olds[tree] is None:
                continue          # e.g. a checkout without test kernels: no tests/hsaco/ at all
            _install(repo, tree, olds[tree], built, archs, names, tc, Path(tmp))
            written.append(f"{len(built)} code objects and {tree.out}/manifest.json")
    print("wrote " + "; ".join(written))
    return 0


def _install(repo: Path, tree: Tree, old: dict[str, Any] | None, results: dict[str, Built],
             archs: list[str] | None, names: list[str] | None, tc: Toolchain, tmp: Path) -> None:
    out_dir = repo / tree.out
    entries: dict[str, dict[str, Any]] = {}
    obsolete: list[str] = []
    if old is not None:
        for key, entry in old["code_objects"].items():
            if key in results:
                continue
            if (archs is not None and entry.get("arch") not in archs) or \
                    (names is not None and entry.get("family") not in names):
                entries[key] = entry   # not part of this build: keep it
            else:
                obsolete += [entry.get("path", ""), entry.get("instructions", "")]
        if entries and old["compiler"].get("version") != tc.version:
            print(f"warning: {tree.out}: kept {len(entries)} entries built by {old['compiler'].get('version')!r}; "
                  f"the manifest now names {tc.version!r}", file=sys.stderr)
    entries.update((key, b.entry) for key, b in results.items())

    # Install: whole files by rename, the manifest last.
    out_dir.mkdir(parents=True, exist_ok=True)
    if tree.package and not (out_dir / "__init__.py").exists():
        (out_dir / "__init__.py").touch()   # editable installs need hipskinny.hsaco to be a package
    for b in results.values():
        (out_dir / b.arch).mkdir(exist_ok=True)
        for src, rel in ((b.hsaco, b.entry["path"]), (b.table, b.entry["instructions"])):
            os.replace(src, out_dir / rel)
            os.chmod(out_dir / rel, 0o644)   # data, whether linked now (0755) or taken from the cache
    for rel in obsolete:
        if rel and (out_dir / rel).is_file():
            (out_dir / rel).unlink()
    staged = tmp / f"manifest-{tree.out.replace('/', '-')}.json"
    staged.write_text(dumps(compose(compiler_record(tc), dict(sorted(entries.items())))))
    os.replace(staged, out_dir / "manifest.json")


def check(repo: Path, jobs_by_tree: dict[Tree, list[Job]], archs: list[str], names: list[str] | None,
          workers: int, no_rebuild: bool) -> int:
    """`names` None: every source; otherwise only code objects of these names are in scope."""
    manifests = {tree: load(repo / tree.out / "manifest.json") for tree in jobs_by_tree}
    if manifests[SHIPPED] is None:
        print("STALE: hsaco/manifest.json does not exist; run `python -m build_scripts`")
        return 1
    why_not = ""
    try:
        kind, _exe, version = detect_compiler()
    except ToolchainError as exc:
        kind, version, why_not = "", "", f"no compiler available ({exc})"
    stale: list[str] = []
    in_scope: dict[Tree, dict[str, dict[str, Any]]] = {}
    to_rebuild: list[Job] = []
    hashes_only: list[tuple[Job, dict[str, Any], str]] = []
    modes = set()
    for tree, jobs in jobs_by_tree.items():
        manifest = manifests[tree]
        if manifest is None:
            if jobs:
                stale.append(f"{tree.out}/manifest.json does not exist")
            continue
        recorded = manifest["compiler"]
        rebuild = not no_rebuild and kind == recorded.get("kind") and version == recorded.get("version")
        if rebuild:
            modes.add(f"rebuild with {version} and compare bytes")
        elif no_rebuild:
            modes.add("compare source hashes (--no-rebuild)")
        elif kind:
            modes.add(f"compare source hashes; available compiler {version!r} ({kind}) differs from "
                      f"{tree.out}/manifest.json's {recorded.get('version')!r}")
        else:
            modes.add(f"compare source hashes; {why_not}")
        # Entries in scope; without --family that includes names whose source is gone.
        entries = {k: e for k, e in manifest["code_objects"].items()
                   if e.get("arch") in archs and (names is None or e.get("family") in names)}
        in_scope[tree] = entries
        expected = {j.key: j for j in jobs}
        for job in jobs:
            if job.key not in entries:
                stale.append(f"{job.label}: {job.source} has no code object in the manifest")
        for key, e in sorted(entries.items()):
            if key not in expected:
                gone = next(iter(e.get("sources", {})), f"{tree.src}/{e.get('family')}.hip")
                why = f"no longer targets {e.get('arch')}" if (repo / gone).is_file() else "no longer exists"
                stale.append(f"{tree.label(key)}: {gone} {why}")
                continue
            for field, sha_field in (("path", "sha256"), ("instructions", "instructions_sha256")):
                path = repo / tree.out / e[field]
                if not path.is_file():
                    stale.append(f"{tree.label(key)}: {tree.out}/{e[field]} is missing")
                elif sha256_bytes(path.read_bytes()) != e[sha_field]:
                    stale.append(f"{tree.label(key)}: {tree.out}/{e[field]} does not match its sha256 in the "
                                 "manifest")
            if rebuild:
                to_rebuild.append(expected[key])
            else:
                hashes_only.append((expected[key], e, recorded.get("kind", "")))
    for mode in sorted(modes):
        print(f"check mode: {mode}", flush=True)

    if to_rebuild:
        stale += _rebuild_and_compare(repo, in_scope, to_rebuild, workers)
    stale += _compare_sources(repo, hashes_only)
    if stale:
        print(f"STALE ({len(stale)}):")
        print("\n".join(f"  {s}" for s in stale))
        print("run `python -m build_scripts` to rebuild")
        return 1
    for tree, entries in in_scope.items():
        print(f"{tree.out}/ matches the sources ({len(entries)} code objects)")
    return 0


def _rebuild_and_compare(repo: Path, in_scope: dict[Tree, dict[str, dict[str, Any]]], jobs: list[Job],
                         workers: int) -> list[str]:
    stale: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hipskinny-check-") as tmp:
        tc = find_toolchain(Path(tmp))
        results, errors = build_jobs(tc, repo, jobs, Path(tmp) / "out", workers)
        stale += [f"rebuild failed: {e}" for e in errors]
        for job in jobs:
            b = results.get(job)
            if b is None:
                continue
            e = in_scope[job.tree][job.key]
            out = repo / job.tree.out
            if b.hsaco.read_bytes() != _read(out / e["path"]):
                stale.append(f"{job.label}: rebuilt {job.tree.out}/{e['path']} differs")
            if b.table.read_bytes() != _read(out / e["instructions"]):
                stale.append(f"{job.label}: rebuilt {job.tree.out}/{e['instructions']} differs")
            now, then = b.entry.get("sources", {}), e.get("sources", {})
            for rel in sorted(set(now) | set(then)):
                if now.get(rel) != then.get(rel):
                    what = "changed" if rel in now and rel in then else "is new" if rel in now else "is gone"
                    stale.append(f"{job.label}: source {rel} {what} since the build")
            for field in sorted(set(b.entry) | set(e)):
                if b.entry.get(field) != e.get(field) and field not in ("sha256", "instructions_sha256", "sources"):
                    stale.append(f"{job.label}: manifest field {field!r} differs from the rebuild")
    return stale


def _compare_sources(repo: Path, items: list[tuple[Job, dict[str, Any], str]]) -> list[str]:
    stale: list[str] = []
    for job, e, kind in items:
        for rel, sha in sorted(e.get("sources", {}).items()):
            path = repo / rel
            if not path.is_file():
                stale.append(f"{job.label}: source {rel} is missing")
            elif sha256_bytes(path.read_bytes()) != sha:
                stale.append(f"{job.label}: source {rel} changed since the build")
        if kind in ("clang", "hipcc") and e.get("flags") != job.flags(kind):
            stale.append(f"{job.label}: {'assembler' if job.is_asm else 'compile'} flags changed since the build")
    return stale


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    repo = REPO_ROOT
    unknown = sorted(set(args.arch) - set(ARCHS))
    if unknown:
        print(f"error: unknown arch {', '.join(unknown)}; shipped archs: {', '.join(ARCHS)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("error: -j needs a positive number", file=sys.stderr)
        return 2
    archs = [a for a in ARCHS if not args.arch or a in args.arch]
    if args.no_cache:
        os.environ["HIPSKINNY_BUILD_CACHE"] = "0"
    try:
        every = {tree: jobs_in(repo, tree) for tree in TREES}
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    known = {j.name for jobs in every.values() for j in jobs}
    missing = sorted(set(args.family) - known)
    if missing:
        tests = sorted({j.name for j in every[TESTS]})
        print(f"error: no kernels/{missing[0]}.hip nor test kernel {missing[0]} in tests/kernels/; "
              f"families: {', '.join(families_in(repo)) or 'none'}; test kernels: {', '.join(tests) or 'none'}",
              file=sys.stderr)
        return 2
    jobs_by_tree = {tree: [j for j in jobs if j.arch in archs and (not args.family or j.name in args.family)]
                    for tree, jobs in every.items()}
    try:
        if args.check:
            return check(repo, jobs_by_tree, archs, args.family or None, args.jobs, args.no_rebuild)
        if not every[SHIPPED]:
            print("error: no kernels/*.hip to build", file=sys.stderr)
            return 1
        return build(repo, jobs_by_tree, args.arch or None, args.family or None, args.jobs)
    except (ToolchainError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
