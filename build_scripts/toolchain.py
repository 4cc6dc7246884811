"""Find the compiler and prepare what it needs (see shared/TOOLCHAIN.md).

Two kinds: ROCm's ``hipcc`` when installed, otherwise Debian's ``clang++-22`` with the
HIP headers and ockl/ocml bitcode taken from the pinned triton wheel, plus a tiny
per-arch module of the ``__oclc_*`` control constants that ROCm normally supplies.
Test kernels written in assembly use the same LLVM release's ``llvm-mc`` and ``ld.lld``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hipskinny.arch import ARCHS

TRITON_VERSION = "3.5.1"
TRITON_WHEEL = "triton-3.5.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
TRITON_SHA256 = "61413522a48add32302353fdbaaf92daaaab06f6b5e3229940d21b5207f47579"
HIP_HEADERS_ORIGIN = f"triton=={TRITON_VERSION}"
HIP_VERSION = (6, 2, 0)
_WHEEL_PREFIXES = ("triton/backends/amd/include/", "triton/backends/amd/lib/")
_CLANG = "clang++-22"

# Hand-written assembly (test kernels): llvm-mc to an object, ld.lld to a code object.
ASM_FLAGS = ("-triple=amdgcn-amd-amdhsa", "-filetype=obj")
LINK_FLAGS = ("-shared",)

# Placeholders in the recorded flags for paths that differ between machines.
# Compiler options of one family beyond the common flags. matmul_4bit_splitk: LLVM's StructurizeCFG
# otherwise linearizes the kernel's uniform nested / plain branch (two copies of the main loop), so
# the values only the second copy reads stay live through the first; on gfx9 those were 2-17 SGPRs
# past the 102 of a wave once the split-K walk (hipskinny/splitk.h) held its own (82-90 with it).
FAMILY_FLAGS: dict[str, tuple[str, ...]] = {
    "matmul_4bit_splitk": ("-mllvm", "-structurizecfg-skip-uniform-regions=true"),
}
HIP_ROOT = "<hip-root>"
OCLC_DIR = "<oclc>"


class ToolchainError(Exception):
    """The compiler, a tool or the HIP headers cannot be found or prepared."""


@dataclass(frozen=True)
class Toolchain:
    kind: str                 # "clang" or "hipcc"
    compiler: str             # executable
    version: str              # first line of `--version`
    objdump: str
    hip_root: Path | None     # clang only: include/, lib/ockl.bc, lib/ocml.bc, share/hip/version
    oclc_dir: Path | None     # clang only: oclc_<arch>.bc, made by `prepare_oclc`
    # The same LLVM release's assembler and linker (test kernels in assembly); None if not installed.
    assembler: str | None = None
    linker: str | None = None

    @property
    def hip_headers(self) -> str:
        return HIP_HEADERS_ORIGIN if self.kind == "clang" else "rocm"

    def flags(self, arch: str, family: str) -> list[str]:
        """Compile flags with machine-specific paths as placeholders (what the manifest records)."""
        wave = ARCHS[arch].wave_size
        flags = [
            "-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", f"--offload-arch={arch}",
            "-O3", "-std=c++17", "-Wall", f"-D__AMDGCN_WAVEFRONT_SIZE={wave}",
            # Kernel argument names in the metadata, so launches bind arguments by name (the
            # instructions do not change: encodings compared on every arch).
            "-fno-discard-value-names",
            # A fixed cuid replaces clang's random __hip_cuid_ suffix: reproducible output.
            f"-cuid=hipskinny-{family}",
            "-I", "kernels/include",
            *FAMILY_FLAGS.get(family, ()),
        ]
        if self.kind == "clang":
            flags += [
                "-nogpulib", f"--hip-path={HIP_ROOT}",
                # __FILE__ in HIP headers must not carry the cache path.
                f"-ffile-prefix-map={HIP_ROOT}=hip",
                # ocml/ockl first, then the oclc constants they read (TOOLCHAIN.md).
                "-Xclang", "-mlink-builtin-bitcode", "-Xclang", f"{HIP_ROOT}/lib/ockl.bc",
                "-Xclang", "-mlink-builtin-bitcode", "-Xclang", f"{HIP_ROOT}/lib/ocml.bc",
                "-Xclang", "-mlink-builtin-bitcode", "-Xclang", f"{OCLC_DIR}/oclc_{arch}.bc",
            ]
        return flags

    @staticmethod
    def asm_flags(arch: str) -> list[str]:
        """What the manifest records for an assembled kernel: the llvm-mc flags, then the link."""
        return ["llvm-mc", *ASM_FLAGS, f"-mcpu={arch}", "ld.lld", *LINK_FLAGS]

    def asm_commands(self, arch: str, source: str, obj: Path, output: Path) -> list[list[str]]:
        """Assemble `source` into `obj`, then link `obj` into the code object `output`."""
        if self.assembler is None or self.linker is None:
            missing = "llvm-mc" if self.assembler is None else "ld.lld"
            raise ToolchainError(f"{missing} of the compiler's LLVM release not found "
                                 "(apt-get install llvm-22 lld-22)")
        return [[self.assembler, *ASM_FLAGS, f"-mcpu={arch}", "-o", str(obj), source],
                [self.linker, *LINK_FLAGS, "-o", str(output), str(obj)]]

    def command(self, arch: str, family: str, source: str, output: Path, depfile: Path) -> list[str]:
        """The full command line: flags with real paths, dependency output, source, output."""
        subst = {HIP_ROOT: str(self.hip_root), OCLC_DIR: str(self.oclc_dir)}
        args = []
        for flag in self.flags(arch, family):
            for key, value in subst.items():
                flag = flag.replace(key, value)
            args.append(flag)
        # The driver drops -MD/-MF for device-only jobs, so ask cc1 directly (user headers only).
        deps = ["-Xclang", "-dependency-file", "-Xclang", str(depfile), "-Xclang", "-MT", "-Xclang", family]
        return [self.compiler, *args, *deps, "-o", str(output), source]


def cache_dir() -> Path:
    env = os.environ.get("HIPSKINNY_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "hipskinny"


def _version_line(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolchainError(f"cannot run {exe} --version: {exc}") from exc
    return out.splitlines()[0].strip() if out.strip() else ""


def _find_hipcc() -> Path | None:
    roots = [os.environ["ROCM_PATH"]] if os.environ.get("ROCM_PATH") else []
    roots.append("/opt/rocm")
    for root in roots:
        hipcc = Path(root) / "bin" / "hipcc"
        if hipcc.is_file() and os.access(hipcc, os.X_OK):
            return hipcc
    return None


def _llvm_tool(compiler: str, name: str) -> str:
    """The LLVM tool of the same release as `compiler` (its own bin dir, then `<name>-22`)."""
    found = _optional_llvm_tool(compiler, name)
    if found is None:
        real = Path(shutil.which(compiler) or compiler).resolve()
        raise ToolchainError(f"{name} not found next to {real} nor as {name}-22 on PATH "
                             "(apt-get install llvm-22)")
    return found


def _optional_llvm_tool(compiler: str, name: str) -> str | None:
    real = Path(shutil.which(compiler) or compiler).resolve()
    sibling = real.parent / name
    if sibling.is_file():
        return str(sibling)
    return shutil.which(f"{name}-22")


def detect_compiler() -> tuple[str, str, str]:
    """(kind, executable, version line) without preparing anything (cheap; used by --check)."""
    hipcc = _find_hipcc()
    if hipcc is not None:
        return "hipcc", str(hipcc), _version_line(str(hipcc))
    clang = shutil.which(_CLANG)
    if clang is None:
        raise ToolchainError(f"no ROCm hipcc ($ROCM_PATH/bin/hipcc, /opt/rocm/bin/hipcc) and no {_CLANG} "
                             "on PATH (apt-get install clang-22 lld-22)")
    return "clang", clang, _version_line(clang)


def find_toolchain(work_dir: Path, cache: Path | None = None) -> Toolchain:
    """Ready-to-use toolchain; clang's per-arch oclc modules are written into `work_dir`."""
    kind, exe, version = detect_compiler()
    if kind == "hipcc":
        rocm_llvm = Path(exe).parent.parent / "llvm" / "bin"

        def rocm_tool(name: str) -> str | None:
            return str(rocm_llvm / name) if (rocm_llvm / name).is_file() else _optional_llvm_tool(exe, name)

        tool = rocm_tool("llvm-objdump") or _llvm_tool(exe, "llvm-objdump")
        return Toolchain("hipcc", exe, version, tool, None, None, rocm_tool("llvm-mc"), rocm_tool("ld.lld"))
    hip_root = prepare_hip_root(cache or cache_dir())
    oclc_dir = work_dir / "oclc"
    prepare_oclc(exe, _llvm_tool(exe, "llvm-as"), oclc_dir)
    return Toolchain("clang", exe, version, _llvm_tool(exe, "llvm-objdump"), hip_root, oclc_dir,
                     _optional_llvm_tool(exe, "llvm-mc"), _optional_llvm_tool(exe, "ld.lld"))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_triton_wheel(cache: Path) -> Path:
    """The pinned wheel in `cache`, downloaded with pip if missing, sha256-checked."""
    wheel = cache / TRITON_WHEEL
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            # Pin interpreter and platform so every host fetches the same file (and hash).
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--python-version", "3.11", "--implementation", "cp",
                   "--platform", "manylinux_2_28_x86_64", f"triton=={TRITON_VERSION}", "-d", tmp]
            print(f"fetching the HIP headers: {' '.join(cmd[1:])}", file=sys.stderr)
            done = subprocess.run(cmd, capture_output=True, text=True)
            got = Path(tmp) / TRITON_WHEEL
            if done.returncode != 0 or not got.is_file():
                raise ToolchainError(f"pip download of triton=={TRITON_VERSION} failed "
                                     f"(exit {done.returncode}):\n{done.stdout}{done.stderr}")
            os.replace(got, wheel)
    digest = sha256_file(wheel)
    if digest != TRITON_SHA256:
        raise ToolchainError(f"{wheel} has sha256 {digest}, expected {TRITON_SHA256}; "
                             "delete it to download it again")
    return wheel


def prepare_hip_root(cache: Path) -> Path:
    """`<cache>/hip-root-...`: include/ and lib/ from the wheel plus share/hip/version."""
    root = cache / f"hip-root-{'.'.join(map(str, HIP_VERSION))}-triton-{TRITON_VERSION}"
    marker = root / ".complete"
    if marker.is_file() and marker.read_text().strip() == TRITON_SHA256:
        return root
    wheel = fetch_triton_wheel(cache)
    # Extract beside the final place, then rename: a concurrent or interrupted run never
    # sees a half-extracted root.
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".hip-root-"))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith(_WHEEL_PREFIXES):
                    continue
                rel = Path(name[len("triton/backends/amd/"):])
                if rel.is_absolute() or ".." in rel.parts:
                    raise ToolchainError(f"unexpected path {name!r} in {wheel.name}")
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(info))
        for lib in ("ockl.bc", "ocml.bc"):
            if not (staging / "lib" / lib).is_file():
                raise ToolchainError(f"{wheel.name} has no triton/backends/amd/lib/{lib}")
        version = staging / "share" / "hip" / "version"
        version.parent.mkdir(parents=True)
        # Without this file clang assumes HIP 3.5 and skips its HIP math header.
        major, minor, patch = HIP_VERSION
        version.write_text(f"HIP_VERSION_MAJOR={major}\nHIP_VERSION_MINOR={minor}\nHIP_VERSION_PATCH={patch}\n")
        (staging / ".complete").write_text(TRITON_SHA256 + "\n")
        if marker.is_file():   # another build finished meanwhile
            return root
        if root.exists():
            shutil.rmtree(root)   # an incomplete earlier extraction
        try:
            os.rename(staging, root)
        except OSError:
            if not marker.is_file():   # lost a race against another build: use its copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _datalayout(clang: str) -> str:
    """The amdgcn datalayout of this clang (copied into the oclc module to avoid a link warning)."""
    cmd = [clang, "-x", "hip", "--cuda-device-only", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc",
           "-emit-llvm", "-S", "-o", "-", os.devnull]
    done = subprocess.run(cmd, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("target datalayout"):
            return line
    raise ToolchainError(f"could not read the amdgcn datalayout from {clang}:\n{done.stderr}")


def oclc_module(arch: str, datalayout: str) -> str:
    """LLVM IR of the seven control constants ockl/ocml read (TOOLCHAIN.md)."""
    info = ARCHS[arch]
    wave64 = info.wave_size == 64
    values = (
        ("ABI_version", "i32", 500),
        ("ISA_version", "i32", info.isa_version),
        ("unsafe_math_opt", "i8", 0),
        ("finite_only_opt", "i8", 0),
        ("correctly_rounded_sqrt32", "i8", 1),
        ("wavefrontsize64", "i8", int(wave64)),
        ("wavefrontsize_log2", "i32", 6 if wave64 else 5),
    )
    # linkonce_odr constants (not weak) so the optimizer folds them into the code.
    lines = [datalayout, 'target triple = "amdgcn-amd-amdhsa"', ""]
    lines += [f"@__oclc_{name} = linkonce_odr hidden local_unnamed_addr addrspace(4) constant {ty} {value}"
              for name, ty, value in values]
    return "\n".join(lines) + "\n"


def prepare_oclc(clang: str, llvm_as: str, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = _datalayout(clang)
    for arch in ARCHS:
        ll = out_dir / f"oclc_{arch}.ll"
        ll.write_text(oclc_module(arch, layout))
        done = subprocess.run([llvm_as, str(ll), "-o", str(out_dir / f"oclc_{arch}.bc")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ToolchainError(f"{llvm_as} failed on {ll}:\n{done.stderr}")
