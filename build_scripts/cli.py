"""``python -m build_scripts``: build hsaco/ from kernels/, or check that it is fresh."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from frontend.arch import ARCHS

from . import REPO_ROOT
from .compiler import BuildError, Built, compile_family, sha256_bytes
from .manifest import ManifestError, compose, dumps, load
from .toolchain import Toolchain, ToolchainError, detect_compiler, find_toolchain


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m build_scripts",
        description="Compile kernels/*.hip for every shipped arch into hsaco/, or check hsaco/ is fresh.")
    p.add_argument("--check", action="store_true",
                   help="verify hsaco/ matches the sources (rebuild and compare bytes when the manifest's "
                        "compiler is available, otherwise compare source hashes); exit 1 if stale")
    p.add_argument("--no-rebuild", action="store_true",
                   help="with --check: compare source hashes only, even if the compiler is available")
    p.add_argument("--arch", action="extend", nargs="+", default=[], metavar="A",
                   help=f"only these archs (default: all of {', '.join(ARCHS)})")
    p.add_argument("--family", action="extend", nargs="+", default=[], metavar="F",
                   help="only these kernel families (kernels/<F>.hip; default: all)")
    p.add_argument("-j", "--jobs", type=int, default=2, metavar="N",
                   help="archs built in parallel (default 2)")
    return p


def families_in(repo: Path) -> list[str]:
    return sorted(p.stem for p in (repo / "kernels").glob("*.hip"))


def compile_all(tc: Toolchain, repo: Path, archs: list[str], families: list[str], out_dir: Path,
                jobs: int) -> tuple[dict[str, Built], list[str]]:
    """Build every (arch, family); archs run in parallel. Returns (built by key, errors)."""

    def one_arch(arch: str) -> tuple[list[Built], list[str]]:
        built, errors = [], []
        for family in families:
            try:
                b = compile_family(tc, repo, arch, family, out_dir)
            except BuildError as exc:
                errors.append(str(exc))
                continue
            print(f"  {arch}/{family}: {len(b.entry['kernels'])} kernels, {b.seconds:.1f} s", flush=True)
            if b.warnings:
                print(f"  {arch}/{family}: compiler warnings:\n{b.warnings}", file=sys.stderr, flush=True)
            built.append(b)
        return built, errors

    results: dict[str, Built] = {}
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for built, errs in pool.map(one_arch, archs):
            results.update((f"{b.arch}/{b.family}", b) for b in built)
            errors += errs
    return results, errors


def compiler_record(tc: Toolchain) -> dict[str, str]:
    return {"kind": tc.kind, "version": tc.version, "hip_headers": tc.hip_headers}


def build(repo: Path, archs: list[str], families: list[str], filtered: bool, jobs: int) -> int:
    hsaco_dir = repo / "hsaco"
    manifest_path = hsaco_dir / "manifest.json"
    old = load(manifest_path)
    # The temp dir sits in the repo so the final os.replace calls stay on one filesystem.
    with tempfile.TemporaryDirectory(dir=repo, prefix=".hsaco-build-") as tmp:
        tc = find_toolchain(Path(tmp))
        print(f"building {len(families)} families x {len(archs)} archs with {tc.version} ({tc.kind})",
              flush=True)
        results, errors = compile_all(tc, repo, archs, families, Path(tmp) / "out", jobs)
        if errors:
            print("\n".join(["BUILD FAILED:", *errors, "hsaco/ was left unchanged."]), file=sys.stderr)
            return 1

        entries: dict[str, dict[str, Any]] = {}
        obsolete: list[str] = []
        if old is not None:
            for key, entry in old["code_objects"].items():
                if key in results:
                    continue
                if filtered:
                    entries[key] = entry   # not part of this build: keep it
                else:
                    obsolete += [entry.get("path", ""), entry.get("listing", "")]
            if filtered and entries and old["compiler"].get("version") != tc.version:
                print(f"warning: kept {len(entries)} entries built by {old['compiler'].get('version')!r}; "
                      f"the manifest now names {tc.version!r}", file=sys.stderr)
        entries.update((key, b.entry) for key, b in results.items())

        # Install: whole files by rename, the manifest last.
        hsaco_dir.mkdir(exist_ok=True)
        if not (hsaco_dir / "__init__.py").exists():
            (hsaco_dir / "__init__.py").touch()   # editable installs need hipskinny.hsaco to be a package
        for b in results.values():
            (hsaco_dir / b.arch).mkdir(exist_ok=True)
            os.replace(b.hsaco, hsaco_dir / b.entry["path"])
            os.replace(b.listing, hsaco_dir / b.entry["listing"])
        for rel in obsolete:
            if rel and (hsaco_dir / rel).is_file():
                (hsaco_dir / rel).unlink()
        staged = Path(tmp) / "manifest.json"
        staged.write_text(dumps(compose(compiler_record(tc), dict(sorted(entries.items())))))
        os.replace(staged, manifest_path)
    print(f"wrote {len(results)} code objects and hsaco/manifest.json")
    return 0


def check(repo: Path, archs: list[str], families: list[str], family_filter: bool, jobs: int,
          no_rebuild: bool) -> int:
    hsaco_dir = repo / "hsaco"
    manifest = load(hsaco_dir / "manifest.json")
    if manifest is None:
        print("STALE: hsaco/manifest.json does not exist; run `python -m build_scripts`")
        return 1
    recorded = manifest["compiler"]
    try:
        kind, _exe, version = detect_compiler()
        why = f"available compiler {version!r} ({kind}) differs from the manifest's {recorded.get('version')!r}"
    except ToolchainError as exc:
        kind, version, why = "", "", f"no compiler available ({exc})"
    rebuild = not no_rebuild and kind == recorded.get("kind") and version == recorded.get("version")
    if rebuild:
        print(f"check mode: rebuild with {version} and compare bytes", flush=True)
    else:
        print("check mode: compare source hashes" + (" (--no-rebuild)" if no_rebuild else f"; {why}"), flush=True)

    # Entries in scope; without --family that includes families whose source is gone.
    entries = {k: e for k, e in manifest["code_objects"].items()
               if e.get("arch") in archs and (not family_filter or e.get("family") in families)}
    stale: list[str] = []
    for arch in archs:
        for family in families:
            if f"{arch}/{family}" not in entries:
                stale.append(f"{arch}/{family}: kernels/{family}.hip has no code object in the manifest")
    for key, e in sorted(entries.items()):
        if e.get("family") not in families:
            stale.append(f"{key}: kernels/{e.get('family')}.hip no longer exists")
        for field, sha_field in (("path", "sha256"), ("listing", "listing_sha256")):
            path = hsaco_dir / e[field]
            if not path.is_file():
                stale.append(f"{key}: hsaco/{e[field]} is missing")
            elif sha256_bytes(path.read_bytes()) != e[sha_field]:
                stale.append(f"{key}: hsaco/{e[field]} does not match its sha256 in the manifest")

    buildable = sorted(k for k, e in entries.items() if e.get("family") in families)
    if rebuild:
        stale += _rebuild_and_compare(repo, hsaco_dir, entries, buildable, jobs)
    else:
        stale += _compare_sources(repo, recorded.get("kind", ""), entries, buildable)
    if stale:
        print(f"STALE ({len(stale)}):")
        print("\n".join(f"  {s}" for s in stale))
        print("run `python -m build_scripts` to rebuild")
        return 1
    print(f"hsaco/ matches the sources ({len(entries)} code objects)")
    return 0


def _rebuild_and_compare(repo: Path, hsaco_dir: Path, entries: dict[str, dict[str, Any]], keys: list[str],
                         jobs: int) -> list[str]:
    stale: list[str] = []
    archs = [a for a in ARCHS if any(entries[k]["arch"] == a for k in keys)]
    families = sorted({entries[k]["family"] for k in keys})
    with tempfile.TemporaryDirectory(prefix="hipskinny-check-") as tmp:
        tc = find_toolchain(Path(tmp))
        results, errors = compile_all(tc, repo, archs, families, Path(tmp) / "out", jobs)
        stale += [f"rebuild failed: {e}" for e in errors]
        for key in keys:
            b = results.get(key)
            if b is None:
                continue
            e = entries[key]
            if b.hsaco.read_bytes() != _read(hsaco_dir / e["path"]):
                stale.append(f"{key}: rebuilt hsaco/{e['path']} differs")
            if b.listing.read_bytes() != _read(hsaco_dir / e["listing"]):
                stale.append(f"{key}: rebuilt hsaco/{e['listing']} differs")
            now, then = b.entry.get("sources", {}), e.get("sources", {})
            for rel in sorted(set(now) | set(then)):
                if now.get(rel) != then.get(rel):
                    what = "changed" if rel in now and rel in then else "is new" if rel in now else "is gone"
                    stale.append(f"{key}: source {rel} {what} since the build")
            for field in sorted(set(b.entry) | set(e)):
                if b.entry.get(field) != e.get(field) and field not in ("sha256", "listing_sha256", "sources"):
                    stale.append(f"{key}: manifest field {field!r} differs from the rebuild")
    return stale


def _compare_sources(repo: Path, kind: str, entries: dict[str, dict[str, Any]], keys: list[str]) -> list[str]:
    stale: list[str] = []
    flags_of = Toolchain(kind, "", "", "", None, None)
    for key in keys:
        e = entries[key]
        for rel, sha in sorted(e.get("sources", {}).items()):
            path = repo / rel
            if not path.is_file():
                stale.append(f"{key}: source {rel} is missing")
            elif sha256_bytes(path.read_bytes()) != sha:
                stale.append(f"{key}: source {rel} changed since the build")
        if kind in ("clang", "hipcc") and e.get("flags") != flags_of.flags(e["arch"], e["family"]):
            stale.append(f"{key}: compile flags changed since the build")
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
    all_families = families_in(repo)
    missing = sorted(set(args.family) - set(all_families))
    if missing:
        print(f"error: no kernels/{missing[0]}.hip; families: {', '.join(all_families) or 'none'}",
              file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("error: -j needs a positive number", file=sys.stderr)
        return 2
    archs = [a for a in ARCHS if not args.arch or a in args.arch]
    families = [f for f in all_families if not args.family or f in args.family]
    try:
        if args.check:
            return check(repo, archs, families, bool(args.family), args.jobs, args.no_rebuild)
        if not families:
            print("error: no kernels/*.hip to build", file=sys.stderr)
            return 1
        return build(repo, archs, families, bool(args.arch or args.family), args.jobs)
    except (ToolchainError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
