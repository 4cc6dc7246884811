"""Run code against a fake HIP runtime: no GPU, no ROCm, real hip-python.

``fake_hip.c`` is compiled into ``<root>/lib/libamdhip64.so``; hip-python 10.x finds it through
``ROCM_PATH=<root>``, 7.x through ``LD_LIBRARY_PATH=<root>/lib``. hip-python caches the library
after its first call, so every scenario runs in a fresh Python subprocess, and the fake logs each
call as one JSON line that `run_with_fakehip` hands back as dicts.

    records, stdout = run_with_fakehip("from hipskinny.devices.hip import HipDevice; ...",
                                       env={"FAKEHIP_ARCH": "gfx1100"}, hip_python="7")

hip-python 10.x is the installed one; 7.2.2 is installed on demand with ``pip install --no-deps
--target`` into ``$HIPSKINNY_CACHE_DIR/hip-python-7.2.2`` (default ``~/.cache/hipskinny``) and put
first on the subprocess's PYTHONPATH. `fake_code_object` makes a small ELF that defines kernels.

The fake also does stream capture and graphs (hipStreamBeginCapture/EndCapture/IsCapturing/
GetCaptureInfo, hipStreamCreateWithFlags, hipGraphInstantiate/Launch/Destroy/ExecDestroy): launches
on a capturing stream are logged with ``"captured": true`` and a ``"capture_id"`` and not run;
hipGraphLaunch replays them through the launch hook, each logged as ``fakehip_graph_kernel``.
hipMalloc/hipFree/hipStreamSynchronize/hipDeviceSynchronize fail with hipErrorStreamCaptureUnsupported
(900) and synchronous copies/memsets and null-stream work with hipErrorStreamCaptureImplicit (906),
invalidating the capture (logged as ``"invalidated": [ids]``), so hipStreamEndCapture then fails
with hipErrorStreamCaptureInvalidated (901). The exact rules are in fake_hip.c ("stream capture
state"); tests/runtime/test_fakehip_capture.py checks them through both hip-python generations.

Scenarios import their scaffolding from here (after ``sys.path.insert(0, <the tests directory>)``):
`fakehip.scenario` (hip-python and ctypes only: ``ok``/``code`` for hip-python results,
``instantiate`` across both generations, the fake's launch hook type and live allocations),
`fakehip.torch_seam` (torch tensors over fake device memory, the ``present_cpu_torch_as_gpu`` seam
with a capture stream, a bump pool for outputs during a capture) and `fakehip.emulated` (launches
carried out on the CPU emulator).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import site
import struct
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from paths import folders as suite_folders

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_hip.c"
REPO = HERE.parent.parent
FRONTEND = REPO / "frontend"

GENERATIONS: tuple[str, ...] = ("10", "7")
HIP_PYTHON_7 = "7.2.2.562.43"
# HIP version each hip-python generation was generated from (hip.HIP_VERSION); the fake reports
# the matching runtime version by default, so version checks pass unless a test says otherwise.
HIP_VERSION = {"10": 71526333, "7": 70253211}

# Variables that could point hip-python at some other HIP runtime.
_ROCM_ENV = ("ROCM_PATH", "ROCM_HOME", "HIP_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD")


def cache_dir() -> Path:
    base = os.environ.get("HIPSKINNY_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "hipskinny"


# -- the library -----------------------------------------------------------------------------------

def build_fake_hip(root: Path) -> Path:
    """Compile fake_hip.c into ``root/lib/libamdhip64.so`` (skipped when already up to date)."""
    lib = Path(root) / "lib" / "libamdhip64.so"
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    stamp = lib.with_name("libamdhip64.so.sha256")
    if lib.exists() and stamp.exists() and stamp.read_text() == digest:
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    compiler = os.environ.get("CC", "cc")
    tmp = lib.with_name(f".libamdhip64.{os.getpid()}.so")
    cmd = [compiler, "-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-o", str(tmp), str(SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the fake HIP runtime failed: {' '.join(cmd)}\n{done.stderr}")
    os.replace(tmp, lib)  # atomic, so a concurrent build never leaves a half-written library
    stamp.write_text(digest)
    return lib


# -- hip-python 7.x ----------------------------------------------------------------------------------

def ensure_hip_python7() -> Path:
    """The directory holding hip-python 7.2.2, installed there on first use. Raises if it cannot be."""
    target = cache_dir() / "hip-python-7.2.2"
    marker = target / ".installed"
    if marker.exists() and (target / "hip" / "__init__.py").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".hip-python-7.", dir=target.parent))
    try:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
               "--target", str(staging), f"hip-python=={HIP_PYTHON_7}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not (staging / "hip" / "__init__.py").exists():
            raise RuntimeError(f"could not install hip-python {HIP_PYTHON_7} for the 7.x tests:\n"
                               f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
        (staging / ".installed").write_text(HIP_PYTHON_7)
        if target.exists():
            shutil.rmtree(target)
        with contextlib.suppress(OSError):  # another process may have won the race: use theirs
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not marker.exists():
        raise RuntimeError(f"hip-python {HIP_PYTHON_7} did not end up in {target}")
    return target


# -- the package -------------------------------------------------------------------------------------

def hipskinny_path(workdir: Path) -> list[str]:
    """PYTHONPATH entries that let a subprocess ``import hipskinny`` as this process would.

    An installed hipskinny (``pip install .``) needs none, unless it was found through a path added
    at run time. A checkout's frontend/ imported as hipskinny (an editable install, or the benchmarks
    measuring the tree they live in, whatever is installed) is mapped by a directory ``hipskinny``
    of links to its files and to the checkout's hsaco/, made in ``workdir`` (PYTHONPATH comes before
    an editable install's finder); with none importable, this checkout's.
    """
    spec = importlib.util.find_spec("hipskinny")
    front = FRONTEND
    if spec is not None and spec.submodule_search_locations:
        location = Path(list(spec.submodule_search_locations)[0])
        if location.name == "hipskinny":
            parent = location.parent.resolve()
            site_dirs = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages())}
            return [] if parent in site_dirs else [str(parent)]
        front = location
    shim = Path(workdir) / "hipskinny-src"
    package = shim / "hipskinny"
    package.mkdir(parents=True, exist_ok=True)
    links = {e.name: e for e in front.iterdir() if e.name != "__pycache__"}
    links["hsaco"] = front.parent / "hsaco"
    for name, target in links.items():
        with contextlib.suppress(FileExistsError):
            (package / name).symlink_to(target, target_is_directory=target.is_dir())
    return [str(shim)]


# -- code objects ------------------------------------------------------------------------------------

def fake_code_object(kernels: tuple[str, ...] | list[str] = ("kernel",), payload: bytes = b"") -> bytes:
    """A minimal ELF64 (EM_AMDGPU) with an STT_FUNC symbol per kernel name and ``payload`` as text.

    The fake runtime takes the image's size from its section headers and accepts the kernel
    names in its symbol table; the bytes are never executed.
    """
    strtab = b"\0" + b"".join(name.encode() + b"\0" for name in kernels)
    shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0"
    symbols = [bytes(24)]
    offset = 1
    for name in kernels:
        # st_name, st_info = GLOBAL FUNC, st_other, st_shndx = .text, st_value, st_size
        symbols.append(struct.pack("<IBBHQQ", offset, 0x12, 0, 1, 0, len(payload)))
        offset += len(name.encode()) + 1
    symtab = b"".join(symbols)

    body = bytearray(64)
    sections = []  # (name offset, type, offset, size, link, info, entsize)
    for name_off, kind, data, link, info, entsize in (
        (1, 1, payload, 0, 0, 0),                    # .text, PROGBITS
        (7, 2, symtab, 3, 1, 24),                    # .symtab, link .strtab, first global 1
        (15, 3, strtab, 0, 0, 0),                    # .strtab
        (23, 3, shstrtab, 0, 0, 0),                  # .shstrtab
    ):
        body += bytes(-len(body) % 8)
        sections.append((name_off, kind, len(body), len(data), link, info, entsize))
        body += data
    body += bytes(-len(body) % 8)
    shoff = len(body)
    body += bytes(64)  # SHT_NULL
    for name_off, kind, off, size, link, info, entsize in sections:
        body += struct.pack("<IIQQQQIIQQ", name_off, kind, 0, 0, off, size, link, info, 8, entsize)
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + bytes(7)  # ELF64, LE, HSA OS ABI, ABI v3
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, shoff, 0x4C, 64, 0, 0, 64,
                                 len(sections) + 1, 4)
    body[:64] = header
    return bytes(body)


def fnv1a64(data: bytes) -> str:
    """The fake's image hash, as it logs it (16 hex digits)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


# -- running code ------------------------------------------------------------------------------------

@dataclass
class FakeHipRun:
    """What a subprocess did: the fake's call log, its output and exit status.

    Unpacks as ``records, stdout = run_with_fakehip(...)``.
    """

    records: list[dict]
    stdout: str
    stderr: str
    returncode: int

    def __iter__(self) -> Iterator[object]:
        return iter((self.records, self.stdout))

    def calls(self, *names: str) -> list[dict]:
        """The records of the named functions, in order (all records when no name is given)."""
        return [r for r in self.records if not names or r["fn"] in names]


def fakehip_env(root: Path, workdir: Path, hip_python: str, log_path: Path,
                env: Mapping[str, str | None] | None = None, with_library: bool = True) -> dict[str, str]:
    """The environment of a subprocess bound to the fake at ``root`` (``env`` overrides; None unsets)."""
    if hip_python not in GENERATIONS:
        raise ValueError(f"hip_python must be one of {GENERATIONS}, got {hip_python!r}")
    out = {k: v for k, v in os.environ.items() if k not in _ROCM_ENV and not k.startswith("FAKEHIP_")}
    if with_library:
        out["ROCM_PATH"] = str(root)
        out["LD_LIBRARY_PATH"] = str(Path(root) / "lib")
    else:
        empty = Path(workdir) / "empty-rocm"
        empty.mkdir(parents=True, exist_ok=True)
        out["ROCM_PATH"] = str(empty)
    out["FAKEHIP_LOG"] = str(log_path)
    out["FAKEHIP_RUNTIME_VERSION"] = str(HIP_VERSION[hip_python])
    paths = [str(ensure_hip_python7())] if hip_python == "7" else []
    paths += hipskinny_path(workdir)
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    paths += suite_folders()          # scenarios import the suite's helpers and test modules by name
    out["PYTHONPATH"] = os.pathsep.join(paths)
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in (env or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


def run_with_fakehip(code: str, env: Mapping[str, str | None] | None = None, hip_python: str = "10", *,
                     root: Path | None = None, with_library: bool = True, check: bool = True,
                     timeout: float = 120) -> FakeHipRun:
    """Run ``code`` in a fresh Python against the fake HIP runtime; return its call log and output.

    ``root`` is where the fake library is built (default: a directory under the cache dir);
    ``with_library=False`` points hip-python at an empty ROCm instead. ``check`` raises when the
    subprocess fails, with its output in the message.
    """
    return start_with_fakehip(code, env, hip_python, root=root, with_library=with_library).wait(check, timeout)


class StartedRun:
    """A fakehip subprocess still running (`start_with_fakehip`); `wait` gives its `FakeHipRun`."""

    def __init__(self, proc: subprocess.Popen, workdir: tempfile.TemporaryDirectory, log_path: Path,
                 hip_python: str) -> None:
        self._proc, self._workdir, self._log_path, self._hip_python = proc, workdir, log_path, hip_python

    def wait(self, check: bool = True, timeout: float = 120) -> FakeHipRun:
        try:
            stdout, stderr = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            self._workdir.cleanup()
            raise
        lines = self._log_path.read_text().splitlines() if self._log_path.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
        self._workdir.cleanup()
        run = FakeHipRun(records, stdout, stderr, self._proc.returncode)
        if check and run.returncode != 0:
            raise AssertionError(f"the fakehip subprocess (hip-python {self._hip_python}) exited with "
                                 f"{run.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
        return run


def start_with_fakehip(code: str, env: Mapping[str, str | None] | None = None, hip_python: str = "10", *,
                       root: Path | None = None, with_library: bool = True) -> StartedRun:
    """`run_with_fakehip` without waiting: the subprocess runs while the caller works."""
    root = Path(root) if root is not None else cache_dir() / "fakehip"
    if with_library:
        build_fake_hip(root)
    tmp = tempfile.TemporaryDirectory(prefix="fakehip-run-")
    workdir = Path(tmp.name)
    log_path = workdir / "calls.jsonl"
    script = workdir / "scenario.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", str(script)], cwd=workdir,
        env=fakehip_env(root, workdir, hip_python, log_path, env, with_library),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return StartedRun(proc, tmp, log_path, hip_python)
