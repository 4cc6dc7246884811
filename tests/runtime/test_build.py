"""build_scripts: freshness check, reproducibility, shipping rules, manifest details."""

from __future__ import annotations

import functools
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import paths
import pytest

REPO = paths.REPO
sys.path.insert(0, str(REPO))   # build_scripts is a repo tool, not part of the package

from compilers import needs_compiler, needs_recorded_compiler  # noqa: E402

from build_scripts.compiler import (  # noqa: E402
    ISA_FAMILIES,
    BuildError,
    asm_targets,
    parse_depfile,
    preprocess_asm,
    read_markers,
)
from build_scripts.manifest import ManifestError, kernel_config, launch_facts, launch_flags  # noqa: E402
from build_scripts.toolchain import (  # noqa: E402
    HIP_ROOT,
    TRITON_WHEEL,
    Toolchain,
    ToolchainError,
    fetch_triton_wheel,
    oclc_module,
)
from hipskinny.arch import ARCHS  # noqa: E402
from hipskinny.codeobject import CodeObject  # noqa: E402
from hipskinny.emulator.listing import listing_text  # noqa: E402

SMALL_HIP = r"""
#include <hip/hip_runtime.h>
#include "small/axpy.h"

extern "C" __global__ void __launch_bounds__(64)
small_f32_u2(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) y[i] = axpy(a, x[i], y[i]);
}
"""
SMALL_H = "#pragma once\n__device__ inline float axpy(float a, float x, float y) { return a * x + y; }\n"
# A dynamically indexed 2 KiB private array: the compiler must put it in scratch.
SCRATCH_HIP = r"""
#include <hip/hip_runtime.h>
extern "C" __global__ void scratchy_f32(const int* idx, float* y) {
  float a[512];
  for (int i = 0; i < 512; ++i) a[i] = y[i * (threadIdx.x + 1)];
  y[threadIdx.x] = a[idx[threadIdx.x]];
}
"""


# A minimal hand-written kernel (tests/kernels/asm/<name>.s), written once for gfx9 and gfx12
# (preceded by a ;%targets line): out[lane] = 7.
TINY_ASM = """
\t.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
\t.amdhsa_code_object_version 6
\t.text
\t.globl tiny
\t.p2align 8
\t.type tiny,@function
tiny:
\ts_load_dwordx2 s[0:1], s[0:1], 0x0\t;%gfx9
\ts_load_b64 s[0:1], s[0:1], 0x0\t;%gfx12
\tv_mov_b32_e32 v1, 7
\tv_lshlrev_b32_e32 v0, 2, v0
\ts_waitcnt lgkmcnt(0)\t;%gfx9
\ts_wait_kmcnt 0x0\t;%gfx12
\tglobal_store_dword v0, v1, s[0:1]\t;%gfx9
\tglobal_store_b32 v0, v1, s[0:1]\t;%gfx12
\ts_endpgm
.Ltiny_end:
\t.size tiny, .Ltiny_end-tiny
\t.rodata
\t.p2align 6
\t.amdhsa_kernel tiny
\t\t.amdhsa_kernarg_size 8
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_wavefront_size32 1\t;%gfx12
\t\t.amdhsa_next_free_vgpr 2
\t\t.amdhsa_next_free_sgpr 2
\t\t.amdhsa_accum_offset 4\t;%gfx9
\t.end_amdhsa_kernel
\t.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - { .name: tiny, .symbol: tiny.kd, .kernarg_segment_size: 8, .kernarg_segment_align: 8,
      .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: @WAVE@,
      .sgpr_count: 4, .vgpr_count: 2, .max_flat_workgroup_size: 64,
      .args: [ { .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global } ] }
...
\t.end_amdgpu_metadata
"""


def run_build(cwd: Path, *args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m build_scripts` in `cwd`, compiling for real unless a build `cache` folder is given."""
    # cwd first on sys.path: the copy's own build_scripts runs, with its frontend/ as `hipskinny` (or the
    # importable hipskinny, if that is an identical copy: see build_scripts._use_tree).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HIPSKINNY_BUILD_CACHE"] = str(cache) if cache else "0"
    return subprocess.run([sys.executable, "-m", "build_scripts", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def make_tree(root: Path, with_repo_kernels: bool = False, extra: dict[str, str] | None = None) -> Path:
    """A minimal repo: build_scripts/ + frontend/ (+ the repo's kernels/ and hsaco/)."""
    root.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("build_scripts", "frontend"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    if with_repo_kernels:
        shutil.copytree(REPO / "kernels", root / "kernels", ignore=ignore)
        shutil.copytree(REPO / "hsaco", root / "hsaco", ignore=ignore)
    for rel, text in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def repo_test_kernels() -> dict[str, list[str]]:
    """{name: [archs]} of the repo's test kernels: every arch for .hip, the archs of its ;%targets line
    (default all) for asm."""
    out = {p.stem: list(ARCHS) for p in (REPO / "tests" / "kernels").glob("*.hip")}
    for p in (REPO / "tests" / "kernels" / "asm").glob("*.s"):
        assert p.stem not in out
        out[p.stem] = list(asm_targets(p.read_text(), p.name))
    return out


def committed_families() -> list[str]:
    manifest = REPO / "hsaco" / "manifest.json"
    assert manifest.is_file(), "hsaco/manifest.json is missing: run `python -m build_scripts`"
    return sorted({e["family"] for e in json.loads(manifest.read_text())["code_objects"].values()})


# --- the committed tree ----------------------------------------------------------------


def test_check_passes_on_committed_tree():
    """Hashes of every committed code object, instruction table and source, with any compiler or none (seconds);
    `.ci/run` rebuilds them all with the recorded compiler (`python -m build_scripts --check`)."""
    done = run_build(REPO, "--check", "--no-rebuild")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check mode: compare source hashes (--no-rebuild)" in done.stdout
    assert "hsaco/ matches the sources" in done.stdout
    assert "tests/hsaco/ matches the sources" in done.stdout


def test_build_tests_pass_without_a_compiler(tmp_path):
    """On a machine with no compiler (a user's, without clang-22 or ROCm) the build and code-object tests
    pass, and the ones that need a compiler are reported as skipped with the reason."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ROCM_PATH")}
    env["PATH"] = str(tmp_path)         # an empty PATH: no clang++-22 (ROCm's hipcc is found by path)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-n", "0",
                           "tests/runtime/test_build.py", "tests/runtime/test_codeobject.py",
                           "-k", "not without_a_compiler"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if not Path("/opt/rocm/bin/hipcc").is_file():
        assert "builds code objects: no compiler here" in done.stdout
        assert "rebuilds and compares bytes: no compiler here" in done.stdout


@needs_recorded_compiler
def test_committed_code_objects_rebuild_byte_for_byte_sample():
    """One family on a wave64 and a wave32 arch, and one hand-written test kernel (under a minute)."""
    done = run_build(REPO, "--check", "--family", "gemv", "control", "--arch", "gfx942", "gfx1201")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check mode: rebuild" in done.stdout
    assert "hsaco/ matches the sources (2 code objects)" in done.stdout
    assert "tests/hsaco/ matches the sources (2 code objects)" in done.stdout


def test_test_manifest_covers_every_test_kernel():
    manifest = json.loads((REPO / "tests" / "hsaco" / "manifest.json").read_text())
    sources = repo_test_kernels()
    assert sources, "no test kernels in tests/kernels/"
    assert set(manifest["code_objects"]) == {f"{a}/{n}" for n, archs in sources.items() for a in archs}
    assert manifest["schema"] == 2 and manifest["archs"] == list(ARCHS)
    shipped = json.loads((REPO / "hsaco" / "manifest.json").read_text())
    assert manifest["compiler"] == shipped["compiler"]
    for key, e in manifest["code_objects"].items():
        assert key == f"{e['arch']}/{e['family']}" and e["path"] == f"{key}.hsaco"
        assert e["instructions"] == f"{key}.itab"
        if f"tests/kernels/{e['family']}.hip" in e["sources"]:
            assert "-cuid=hipskinny-" + e["family"] in e["flags"]
        else:
            assert list(e["sources"]) == [f"tests/kernels/asm/{e['family']}.s"]   # one source, every arch
            assert e["flags"] == Toolchain.asm_flags(e["arch"])
        for k in e["kernels"]:
            assert k["vgpr_spill_count"] == k["sgpr_spill_count"] == k["private_segment_fixed_size"] == 0
            assert k["wavefront_size"] == ARCHS[e["arch"]].wave_size
    # Test code objects are not package data.
    assert not (REPO / "tests" / "hsaco" / "__init__.py").exists()
    package_data = (REPO / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1].split("\n[")[0]
    assert "hipskinny.hsaco" in package_data and "tests" not in package_data


def test_manifest_covers_every_family_and_arch():
    manifest = json.loads((REPO / "hsaco" / "manifest.json").read_text())
    families = sorted(p.stem for p in (REPO / "kernels").glob("*.hip"))
    assert families and committed_families() == families
    assert set(manifest["code_objects"]) == {f"{a}/{f}" for a in ARCHS for f in families}
    assert manifest["schema"] == 2 and manifest["archs"] == list(ARCHS)
    assert manifest["compiler"]["hip_headers"] in ("triton==3.5.1", "rocm")
    text = (REPO / "hsaco" / "manifest.json").read_text()
    assert text == json.dumps(manifest, sort_keys=True, indent=1) + "\n"
    for key, e in manifest["code_objects"].items():
        assert key == f"{e['arch']}/{e['family']}" and e["path"] == f"{key}.hsaco"
        assert f"kernels/{e['family']}.hip" in e["sources"]
        assert not any(f.startswith("/") or "/root/" in f or "/tmp/" in f for f in e["flags"])
        for k in e["kernels"]:
            assert k["vgpr_spill_count"] == k["sgpr_spill_count"] == k["private_segment_fixed_size"] == 0
            assert k["occupancy"] >= 1


def test_check_fails_after_editing_a_kernel(tmp_path):
    family = committed_families()[0]
    root = make_tree(tmp_path / "copy", with_repo_kernels=True)
    src = root / "kernels" / f"{family}.hip"
    src.write_text(src.read_text() + "\n// an edit after the build\n")

    hashes = run_build(root, "--check", "--no-rebuild")
    assert hashes.returncode == 1, hashes.stdout + hashes.stderr
    assert "compare source hashes" in hashes.stdout
    assert f"source kernels/{family}.hip changed" in hashes.stdout


@needs_recorded_compiler
def test_rebuild_check_fails_after_editing_a_kernel(tmp_path):
    family = "gemv"     # a small one: the rebuild takes seconds
    root = make_tree(tmp_path / "copy", with_repo_kernels=True)
    src = root / "kernels" / f"{family}.hip"
    src.write_text(src.read_text() + "\n// an edit after the build\n")
    # Rebuild mode on one arch (runtime): the binary is unchanged by a comment, the sources are not.
    rebuilt = run_build(root, "--check", "--arch", "gfx1201", "--family", family)
    assert rebuilt.returncode == 1, rebuilt.stdout + rebuilt.stderr
    assert "check mode: rebuild" in rebuilt.stdout
    assert f"gfx1201/{family}: source kernels/{family}.hip changed since the build" in rebuilt.stdout


def test_check_reports_missing_and_tampered_files(tmp_path):
    family = committed_families()[0]
    root = make_tree(tmp_path / "copy", with_repo_kernels=True)
    (root / "hsaco" / "gfx950" / f"{family}.itab").unlink()
    with (root / "hsaco" / "gfx942" / f"{family}.hsaco").open("ab") as f:
        f.write(b"\0")
    (root / "kernels" / "newfam.hip").write_text("// not built yet\n")
    done = run_build(root, "--check", "--no-rebuild")
    assert done.returncode == 1
    assert f"gfx950/{family}: hsaco/gfx950/{family}.itab is missing" in done.stdout
    assert f"gfx942/{family}: hsaco/gfx942/{family}.hsaco does not match its sha256" in done.stdout
    assert "gfx1151/newfam: kernels/newfam.hip has no code object" in done.stdout


# --- the package build_scripts reads --------------------------------------------------------


def _python(cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


def test_build_scripts_imports_its_trees_package_as_hipskinny_or_refuses_another_copy(tmp_path):
    """build_scripts imports the package only as `hipskinny` (issue 55): the importable one if it is a copy
    of the tree's frontend/ (an editable install, or CI's `pip install .` before `python -m build_scripts
    --check`), else the tree's frontend/ and hsaco/ under that name; a different hipskinny imported
    before build_scripts is refused, by name and differing file."""
    show = ("import build_scripts, build_scripts.cli, hipskinny, hipskinny.arch; from pathlib import Path; "
            "print(build_scripts._differences(Path(hipskinny.__file__).parent), "
            "build_scripts.cli.ARCHS is hipskinny.arch.ARCHS, 'frontend' in __import__('sys').modules)")
    same = make_tree(tmp_path / "same")
    done = _python(same, show)
    assert done.returncode == 0 and done.stdout.split() == ["[]", "True", "False"], done.stdout + done.stderr

    changed = make_tree(tmp_path / "changed", extra={"hsaco/__init__.py": ""}).resolve()
    with (changed / "frontend" / "arch.py").open("a") as f:
        f.write("# this tree's arch table\n")
    done = _python(changed, "import build_scripts.cli, hipskinny, hipskinny.hsaco; "
                            "print(hipskinny.__file__, hipskinny.hsaco.__file__)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == [str(changed / "frontend" / "__init__.py"), str(changed / "hsaco" / "__init__.py")]

    done = _python(changed, "import hipskinny, build_scripts")
    assert done.returncode == 1
    assert "ImportError: build_scripts: this process imported hipskinny from" in done.stderr, done.stderr
    assert f"not this checkout's {changed / 'frontend'} nor a copy of it (they differ in arch.py" in done.stderr


# --- building ----------------------------------------------------------------------------


@needs_compiler
def test_build_is_reproducible_across_directories(tmp_path):
    files = {"kernels/small.hip": SMALL_HIP, "kernels/include/small/axpy.h": SMALL_H}
    a = make_tree(tmp_path / "a", extra=files)
    b = make_tree(tmp_path / "some" / "much" / "deeper" / "b", extra=files)
    for root in (a, b):
        done = run_build(root, "--arch", "gfx1201")
        assert done.returncode == 0, done.stdout + done.stderr
    for rel in ("gfx1201/small.hsaco", "gfx1201/small.itab", "manifest.json"):
        assert (a / "hsaco" / rel).read_bytes() == (b / "hsaco" / rel).read_bytes(), rel
    assert (a / "hsaco" / "__init__.py").is_file()
    assert not list(a.glob(".hsaco-build-*"))

    # The instruction table: llvm-objdump's instructions and labels, no build paths.
    table = (a / "hsaco" / "gfx1201" / "small.itab").read_bytes()
    assert str(tmp_path).encode() not in lzma.decompress(table)
    listing = listing_text(table, CodeObject.parse((a / "hsaco" / "gfx1201" / "small.hsaco").read_bytes()))
    assert "<small_f32_u2>:" in listing and "// 000000" in listing and "s_endpgm" in listing

    entry = json.loads((a / "hsaco" / "manifest.json").read_text())["code_objects"]["gfx1201/small"]
    assert entry["sources"].keys() == {"kernels/small.hip", "kernels/include/small/axpy.h"}
    [kernel] = entry["kernels"]
    assert kernel["name"] == "small_f32_u2" and kernel["config"] == {"dtype": "f32", "u": 2}
    assert kernel["max_flat_workgroup_size"] == 64 and kernel["wavefront_size"] == 32
    assert kernel["occupancy"] == ARCHS["gfx1201"].occupancy(kernel["vgpr_count"], 0, 2)

    # A filtered build keeps the other archs' entries; --check then sees gfx950 is missing.
    done = run_build(a, "--arch", "gfx942")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((a / "hsaco" / "manifest.json").read_text())
    assert set(manifest["code_objects"]) == {"gfx942/small", "gfx1201/small"}
    assert manifest["archs"] == ["gfx942", "gfx1201"]
    assert run_build(a, "--check", "--arch", "gfx942", "gfx1201").returncode == 0
    incomplete = run_build(a, "--check", "--no-rebuild")
    assert incomplete.returncode == 1 and "gfx950/small: kernels/small.hip has no code object" in incomplete.stdout


@needs_compiler
def test_build_cache_gives_the_compiled_bytes_and_notices_every_input(tmp_path):
    """A second tree with the same sources takes the first tree's build from the cache, byte for byte;
    an edited header, a damaged entry or a new file in the include directory compile again."""
    cache = tmp_path / "cache"
    files = {"kernels/small.hip": SMALL_HIP, "kernels/include/small/axpy.h": SMALL_H}
    a = make_tree(tmp_path / "a", extra=files)
    b = make_tree(tmp_path / "b", extra=files)
    first = run_build(a, "--arch", "gfx1201", cache=cache)
    assert first.returncode == 0 and "from the build cache" not in first.stdout, first.stdout + first.stderr
    [entry] = [p for p in cache.iterdir() if not p.name.startswith(".")]

    def built_from_cache(root: Path, *args: str) -> bool:
        done = run_build(root, "--arch", "gfx1201", *args, cache=cache)
        assert done.returncode == 0, done.stdout + done.stderr
        return "gfx1201/small: 1 kernels, from the build cache" in done.stdout

    assert built_from_cache(b)
    for rel in ("gfx1201/small.hsaco", "gfx1201/small.itab", "manifest.json"):
        assert (a / "hsaco" / rel).read_bytes() == (b / "hsaco" / rel).read_bytes(), rel
    checked = run_build(b, "--check", "--arch", "gfx1201", cache=cache)
    assert checked.returncode == 0 and "from the build cache" in checked.stdout, checked.stdout + checked.stderr

    header = b / "kernels" / "include" / "small" / "axpy.h"
    header.write_text(header.read_text() + "\n// edited\n")
    assert not built_from_cache(b)            # the entry now holds the edited header's hash
    header.write_text(SMALL_H)
    assert not built_from_cache(b)
    assert built_from_cache(b)
    assert not built_from_cache(b, "--no-cache")

    (entry / "code.hsaco").write_bytes(b"damaged")
    assert not built_from_cache(b)
    (b / "kernels" / "include" / "small" / "shadow.h").write_text("// a new header could shadow an old one\n")
    assert not built_from_cache(b)
    same = "gfx1201/small.hsaco"
    assert (a / "hsaco" / same).read_bytes() == (b / "hsaco" / same).read_bytes()


@needs_compiler
def test_build_refuses_scratch_and_leaves_hsaco_alone(tmp_path):
    root = make_tree(tmp_path / "r", extra={"kernels/scratchy.hip": SCRATCH_HIP})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 1
    assert "BUILD FAILED" in done.stderr and "scratchy_f32: uses" in done.stderr and "scratch" in done.stderr
    assert not (root / "hsaco" / "manifest.json").exists()
    assert not list(root.glob(".hsaco-build-*"))


@needs_compiler
def test_compile_error_is_reported(tmp_path):
    root = make_tree(tmp_path / "r", extra={"kernels/broken.hip": "extern \"C\" __global__ void k() { nope(); }\n"})
    done = run_build(root, "--arch", "gfx1151")
    assert done.returncode == 1
    assert "gfx1151/broken: compiler exit" in done.stderr and "nope" in done.stderr


def test_cli_rejects_unknown_names(tmp_path):
    root = make_tree(tmp_path / "r", extra={"kernels/small.hip": SMALL_HIP})
    assert "shipped archs: gfx942" in run_build(root, "--arch", "gfx90a").stderr
    assert "no kernels/nope.hip" in run_build(root, "--family", "nope").stderr


# --- test kernels: tests/kernels/ -> tests/hsaco/ ---------------------------------------------


@needs_compiler
def test_test_kernels_build_into_their_own_tree(tmp_path):
    files = {"kernels/small.hip": SMALL_HIP, "kernels/include/small/axpy.h": SMALL_H,
             "tests/kernels/probe.hip": SMALL_HIP.replace("small_f32_u2", "probe_k"),
             "tests/kernels/asm/tiny.s": ";%targets gfx942 gfx1201\n" + TINY_ASM}
    a = make_tree(tmp_path / "a", extra=files)
    b = make_tree(tmp_path / "elsewhere" / "b", extra=files)
    # One build cache for the whole test: tree a compiles, b and the rebuilding checks below take a's
    # builds (compiling in two folders is test_build_is_reproducible_across_directories's job); an
    # edited source misses the cache and compiles.
    cache = tmp_path / "cache"
    run = functools.partial(run_build, cache=cache)
    for root in (a, b):
        done = run(root, "--arch", "gfx942", "gfx1201")
        assert done.returncode == 0, done.stdout + done.stderr
    for rel in ("gfx942/tiny.hsaco", "gfx942/tiny.itab", "gfx1201/tiny.hsaco", "gfx942/probe.hsaco",
                "manifest.json"):
        assert (a / "tests" / "hsaco" / rel).read_bytes() == (b / "tests" / "hsaco" / rel).read_bytes(), rel
    assert not (a / "tests" / "hsaco" / "__init__.py").exists()
    assert set(json.loads((a / "hsaco" / "manifest.json").read_text())["code_objects"]) == \
        {"gfx942/small", "gfx1201/small"}
    tests = json.loads((a / "tests" / "hsaco" / "manifest.json").read_text())
    assert set(tests["code_objects"]) == {"gfx942/probe", "gfx1201/probe", "gfx942/tiny", "gfx1201/tiny"}
    tiny = tests["code_objects"]["gfx942/tiny"]
    assert tiny["flags"] == Toolchain.asm_flags("gfx942") and tiny["family"] == "tiny"
    assert tiny["sources"].keys() == {"tests/kernels/asm/tiny.s"}
    assert tiny["kernels"][0]["name"] == "tiny" and tiny["kernels"][0]["wavefront_size"] == 64
    assert tests["code_objects"]["gfx1201/tiny"]["kernels"][0]["wavefront_size"] == 32
    tiny_dir = a / "tests" / "hsaco" / "gfx942"
    listing = listing_text((tiny_dir / "tiny.itab").read_bytes(),
                           CodeObject.parse((tiny_dir / "tiny.hsaco").read_bytes()))
    assert "<tiny>:" in listing and "global_store_dword v0, v1, s[0:1]" in listing
    assert tests["code_objects"]["gfx942/probe"]["sources"].keys() == \
        {"tests/kernels/probe.hip", "kernels/include/small/axpy.h"}

    check = run(a, "--check", "--arch", "gfx942", "gfx1201")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "tests/hsaco/ matches the sources (4 code objects)" in check.stdout

    # An edit to the assembly: both check modes see it; other archs (gfx950) are simply absent.
    asm = a / "tests" / "kernels" / "asm" / "tiny.s"
    asm.write_text(asm.read_text().replace("v_mov_b32_e32 v1, 7", "v_mov_b32_e32 v1, 8"))
    hashes = run(a, "--check", "--no-rebuild", "--arch", "gfx942")
    assert hashes.returncode == 1
    assert "tests/hsaco/gfx942/tiny: source tests/kernels/asm/tiny.s changed since the build" in hashes.stdout
    rebuilt = run(a, "--check", "--arch", "gfx942", "--family", "tiny")
    assert rebuilt.returncode == 1
    assert "tests/hsaco/gfx942/tiny: rebuilt tests/hsaco/gfx942/tiny.hsaco differs" in rebuilt.stdout
    missing = run(a, "--check", "--no-rebuild")
    assert "tests/hsaco/gfx950/probe: tests/kernels/probe.hip has no code object in the manifest" in missing.stdout
    assert "gfx950/tiny" not in missing.stdout           # tiny is only written for gfx942 and gfx1201

    # A test kernel that no longer targets an arch makes that code object stale; a build of the kernel
    # drops it.
    asm.write_text(asm.read_text().replace(";%targets gfx942 gfx1201", ";%targets gfx1201"))
    gone = run(a, "--check", "--no-rebuild", "--arch", "gfx942")
    assert "tests/hsaco/gfx942/tiny: tests/kernels/asm/tiny.s no longer targets gfx942" in gone.stdout
    done = run(a, "--family", "tiny")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(json.loads((a / "tests" / "hsaco" / "manifest.json").read_text())["code_objects"]) == \
        {"gfx942/probe", "gfx1201/probe", "gfx1201/tiny"}
    asm.unlink()
    gone = run(a, "--check", "--no-rebuild", "--arch", "gfx1201")
    assert "tests/hsaco/gfx1201/tiny: tests/kernels/asm/tiny.s no longer exists" in gone.stdout


@needs_compiler
def test_build_markers(tmp_path):
    marked = "// hipskinny-build: allow-scratch\n" + SCRATCH_HIP
    # Unmarked scratch in a test kernel is refused like in a shipped one.
    root = make_tree(tmp_path / "unmarked", extra={"kernels/small.hip": SMALL_HIP,
                                                    "kernels/include/small/axpy.h": SMALL_H,
                                                    "tests/kernels/scratchy.hip": SCRATCH_HIP})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 1 and "tests/hsaco/gfx942/scratchy: scratchy_f32: uses" in done.stderr
    assert not (root / "hsaco" / "manifest.json").exists() and not (root / "tests" / "hsaco").exists()
    # The marker lets a test kernel keep its scratch ...
    root = make_tree(tmp_path / "marked", extra={"kernels/small.hip": SMALL_HIP,
                                                  "kernels/include/small/axpy.h": SMALL_H,
                                                  "tests/kernels/scratchy.hip": marked})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 0, done.stdout + done.stderr
    [k] = json.loads((root / "tests" / "hsaco" / "manifest.json").read_text())["code_objects"]["gfx942/scratchy"][
        "kernels"]
    assert k["private_segment_fixed_size"] > 0
    # ... but not a shipped kernel, and not a kernel that does not need it.
    root = make_tree(tmp_path / "shipped", extra={"kernels/scratchy.hip": marked})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 1 and "shipped kernels may not break the rules" in done.stderr
    root = make_tree(tmp_path / "unneeded", extra={"kernels/small.hip": SMALL_HIP,
                                                    "kernels/include/small/axpy.h": SMALL_H,
                                                    "tests/kernels/clean.hip": "// hipskinny-build: allow-scratch\n"
                                                    + SMALL_HIP.replace("small_f32_u2", "clean_k")})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 1 and "build marker allow-scratch is not needed" in done.stderr


@needs_compiler
def test_bad_test_kernel_sources_are_refused(tmp_path):
    base = {"kernels/small.hip": SMALL_HIP, "kernels/include/small/axpy.h": SMALL_H}
    root = make_tree(tmp_path / "name", extra={**base, "tests/kernels/asm/tiny.gfx942.s": TINY_ASM})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 2 and "named <name>.s" in done.stderr
    root = make_tree(tmp_path / "targets", extra={**base, "tests/kernels/asm/tiny.s": ";%targets gfx90a\n" + TINY_ASM})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 2 and "tests/kernels/asm/tiny.s:1: ;%targets: targets are archs" in done.stderr
    root = make_tree(tmp_path / "include", extra={**base, "tests/kernels/asm/tiny.s":
                                                  '\t.include "other.s"\n' + TINY_ASM})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 1 and "must be self-contained" in done.stderr
    # The source names gfx942 as its target but is built for gfx950: llvm-mc refuses.
    root = make_tree(tmp_path / "wrongarch", extra={**base, "tests/kernels/asm/tiny.s": ";%targets gfx950\n"
                                                    + TINY_ASM.replace("@ARCH@", "gfx942")})
    done = run_build(root, "--arch", "gfx950")
    assert done.returncode == 1 and "tests/hsaco/gfx950/tiny:" in done.stderr
    root = make_tree(tmp_path / "clash", extra={**base, "tests/kernels/tiny.hip": SMALL_HIP,
                                                "tests/kernels/asm/tiny.s": TINY_ASM})
    done = run_build(root, "--arch", "gfx942")
    assert done.returncode == 2 and "has the same name" in done.stderr


# --- units -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, family, config", [
    ("gemv_f16_r4_w4", "gemv", {"dtype": "f16", "r": 4, "w": 4}),
    ("gemv_bf16", "gemv", {"dtype": "bf16"}),
    ("fused_moe_fp8_bm16", "fused_moe", {"dtype": "fp8", "bm": 16}),
    ("gemv", "gemv", {}),
    ("gemv_f16_r4_r8", "gemv", {}),          # repeated key
    ("gemv_f16_r4x", "gemv", {}),            # neither key<int> nor a flag
    ("lds_reverse_missing_barrier", "lds_reverse", {}),   # a flag needs a key before it
    ("skinny_gemm_splitk_f16_t8_atomic", "skinny_gemm_splitk", {"dtype": "f16", "t": 8, "atomic": True}),
    ("other_f16_r4", "gemv", {}),
])
def test_kernel_config(name, family, config):
    assert kernel_config(name, family) == config


def test_launch_flags_parse():
    src = "namespace {\nenum Flags : int { kNested = 1, kXFp8 = 0x2, kOutBf16 = 8 };  // bits\n}\n"
    assert launch_flags(src, "x") == {"nested": 1, "x_fp8": 2, "out_bf16": 8}
    assert launch_flags("constexpr int kNested = 1;", "x") == {}
    for bad, why in (("enum Flags : int { kA = 3 };", "single bits"),
                     ("enum Flags : int { kA = 1, kB = 1 };", "distinct"),
                     ("enum Flags : int { a = 1 };", "kName"),
                     ("enum Flags : int { kA = 1 }; enum Flags : int { kB = 2 };", "more than one")):
        with pytest.raises(ManifestError, match=why):
            launch_flags(bad, "x")


def test_launch_facts_parse():
    src = "enum Facts : int { kHeads = 16, kMaxSplits = 0x10 };\nenum Flags : int { kLse = 4 };\n"
    assert launch_facts(src, "x") == {"heads": 16, "max_splits": 16}
    assert launch_facts("constexpr int kHeads = 16;", "x") == {}
    for bad, why in (("enum Facts : int { kA = 1, kA = 2 };", "twice"), ("enum Facts : int { kA = -1 };", "kName"),
                     ("enum Facts : int { kA = 1 }; enum Facts : int { kB = 2 };", "more than one")):
        with pytest.raises(ManifestError, match=why):
            launch_facts(bad, "x")


def test_sparse_mla_planner_reads_the_kernel_facts():
    """The planner's tile sizes and split limit are the kernel source's `enum Facts`, the same for every arch."""
    from hipskinny.arch import SHIPPED_ARCHS
    from hipskinny.ops import sparse_mla

    objects = json.loads((REPO / "hsaco" / "manifest.json").read_text())["code_objects"]
    facts = [e["launch_facts"] for e in objects.values() if e["family"] == "sparse_mla"]
    assert len(facts) == len(SHIPPED_ARCHS) and all(f == facts[0] for f in facts)
    assert facts[0] == {"heads": sparse_mla.HEADS, "rows": sparse_mla.ROWS, "dv": sparse_mla.D_V,
                        "max_splits": sparse_mla.MAX_SPLITS, "wide_heads_wave64": sparse_mla.WIDE_HEADS[64],
                        "wide_heads_wave32": sparse_mla.WIDE_HEADS[32]} == {
        "heads": 16, "rows": 32, "dv": 512, "max_splits": 16, "wide_heads_wave64": 64, "wide_heads_wave32": 32}
    assert all(e["launch_facts"] == {} for e in objects.values() if e["family"] != "sparse_mla")


def test_launch_flags_cover_every_flags_argument():
    """Every code object whose kernels take a ``flags`` argument carries its bits, the same for every
    arch, and a split-K family's bits are its lane-split family's (the ops pass one value to both)."""
    objects = json.loads((REPO / "hsaco" / "manifest.json").read_text())["code_objects"]
    by_family: dict[str, dict[str, int]] = {}
    for e in objects.values():
        takes = any(a[0] == "flags" for k in e["kernels"] for a in k["args"])
        assert bool(e["launch_flags"]) == takes, e["path"]
        assert by_family.setdefault(e["family"], e["launch_flags"]) == e["launch_flags"], e["path"]
    assert by_family["fp8_linear"] == by_family["fp8_linear_splitk"] == {"x_fp8": 2, "x_fnuz": 4, "out_bf16": 8}
    assert by_family["matmul_4bit"] == by_family["matmul_4bit_splitk"] == {"nested": 1}
    assert set(by_family["sparse_mla"]) == {"fnuz0", "fnuz1", "lse", "sink"}


def test_read_markers():
    assert read_markers("int x;\n// hipskinny-build: allow-scratch\n") == {"allow-scratch"}
    assert read_markers("; hipskinny-build: allow-spills, allow-scratch\n") == {"allow-spills", "allow-scratch"}
    assert read_markers("// a comment about hipskinny-build: markers\n") == frozenset()
    with pytest.raises(BuildError, match="unknown build marker"):
        read_markers("// hipskinny-build: allow-everything\n")
    with pytest.raises(BuildError, match="unknown build marker"):
        read_markers("// hipskinny-build:\n")


def test_parse_depfile():
    text = "gemv: kernels/gemv.hip \\\n  kernels/include/a\\ b.h kernels/include/$$x.h\n"
    assert parse_depfile(text) == ["kernels/gemv.hip", "kernels/include/a b.h", "kernels/include/$x.h"]
    assert parse_depfile("") == []


@pytest.mark.parametrize("arch", list(ARCHS))
def test_oclc_module(arch):
    text = oclc_module(arch, 'target datalayout = "e"')
    lines = [line for line in text.splitlines() if line.startswith("@__oclc_")]
    assert len(lines) == 7
    assert all("= linkonce_odr hidden local_unnamed_addr addrspace(4) constant" in line for line in lines)
    wave64 = ARCHS[arch].wave_size == 64
    assert f"@__oclc_ISA_version = linkonce_odr hidden local_unnamed_addr addrspace(4) constant i32 " \
           f"{ARCHS[arch].isa_version}" in lines
    assert lines[-2].endswith(f"i8 {int(wave64)}") and lines[-1].endswith(f"i32 {6 if wave64 else 5}")
    assert 'target triple = "amdgcn-amd-amdhsa"' in text


def test_recorded_flags_have_no_machine_paths():
    flags = Toolchain("clang", "clang++-22", "v", "objdump", Path("/x"), Path("/y")).flags("gfx942", "gemv")
    assert "-cuid=hipskinny-gemv" in flags and "-D__AMDGCN_WAVEFRONT_SIZE=64" in flags and "-Wall" in flags
    assert ["-I", "kernels/include"] == flags[flags.index("-I"):flags.index("-I") + 2]
    assert all(not f.startswith("/") for f in flags) and f"--hip-path={HIP_ROOT}" in flags
    # ockl, ocml, then the oclc constants.
    libs = [f for f in flags if f.endswith(".bc")]
    assert [Path(f).name for f in libs] == ["ockl.bc", "ocml.bc", "oclc_gfx942.bc"]


def test_wheel_with_wrong_hash_is_refused(tmp_path):
    (tmp_path / TRITON_WHEEL).write_bytes(b"not the wheel")
    with pytest.raises(ToolchainError, match="sha256"):
        fetch_triton_wheel(tmp_path)


def test_asm_preprocessing(tmp_path):
    """tests/kernels/asm/<name>.s: one source for every arch it targets, preprocessed per arch."""
    from build_scripts.cli import TESTS, jobs_in

    assert ISA_FAMILIES == {"gfx9": ("gfx942", "gfx950"), "gfx11": ("gfx1100", "gfx1151"), "gfx12": ("gfx1201",)}
    text = ("; @ARCH@ wave@WAVE@\n;%targets gfx9 gfx1100\n;%if gfx942\na942\n;%elif gfx9 gfx1100\nb\n;%else\nc\n"
            ";%endif\nx ;%gfx950\ny\t;%gfx11 gfx942\nend")
    assert asm_targets(text) == ("gfx942", "gfx950", "gfx1100") and asm_targets("x") == tuple(ARCHS)
    assert preprocess_asm(text, "gfx942") == "; gfx942 wave64\na942\ny\nend"
    assert preprocess_asm(text, "gfx950") == "; gfx950 wave64\nb\nx\nend"
    assert preprocess_asm(text, "gfx1100") == "; gfx1100 wave32\nb\ny\nend"
    assert preprocess_asm(text, "gfx1201") == "; gfx1201 wave32\nc\nend"
    for bad in (";%if gfx1100\nx", ";%else\nx", ";%if gfx90a\nx\n;%endif", ";%if gfx942\n;%if gfx950\n;%endif",
                ";%if gfx942\n;%else\n;%elif gfx9\n;%endif", ";%if\n;%endif", ";%gfx9", "x ;%gfx13", "x ;%"):
        with pytest.raises(BuildError, match="conditional|without|targets are"):
            preprocess_asm(bad, "gfx942", "t.s")
    with pytest.raises(BuildError, match="second ;%targets"):
        asm_targets(";%targets gfx9\n;%targets gfx12")
    root = make_tree(tmp_path / "isa", extra={"tests/kernels/asm/tiny.s": ";%targets gfx11\n" + TINY_ASM,
                                              "tests/kernels/asm/every.s": TINY_ASM})
    jobs = jobs_in(root, TESTS)
    assert sorted(j.key for j in jobs if j.name == "tiny") == ["gfx1100/tiny", "gfx1151/tiny"]
    assert {j.source for j in jobs if j.name == "tiny"} == {"tests/kernels/asm/tiny.s"}
    assert sorted(j.arch for j in jobs if j.name == "every") == sorted(ARCHS)
