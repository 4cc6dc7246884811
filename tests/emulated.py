"""Run the test kernels (tests/kernels/, built by ``python -m build_scripts`` into tests/hsaco/) on a device.

    dev = EmulatedDevice("gfx1201")
    module, code = load_test_kernel(dev, "block_reduce")
    x = to_device(dev, np.arange(256, dtype=np.float32))
    launch(dev, module, "block_reduce", grid=1, block=256, args=[x, sums, maxes, 256])
    from_device(dev, sums, (1,), np.float32)

The code objects are not package data, so the emulator does not know their listings
until `load_test_kernel` registers them; arguments are packed from each kernel's own
metadata by the package's launcher, hidden arguments included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from hipskinny.codeobject import CodeObject
from hipskinny.devices.base import Device
from hipskinny.emulator import register_listing
from hipskinny.launch import make_plan

TESTS_DIR = Path(__file__).resolve().parent
HSACO_DIR = TESTS_DIR / "hsaco"
REBUILD = "run `python -m build_scripts` to build the test kernels"

Dim = int | tuple[int, ...]

# id(module) -> (module, code object): launch() finds a kernel's metadata from the module
# handle alone (the module is kept alive here so the id stays unique).
_loaded: dict[int, tuple[Any, CodeObject]] = {}


def _entry(arch: str, name: str) -> dict[str, Any]:
    manifest = HSACO_DIR / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} does not exist; {REBUILD}")
    entries = json.loads(manifest.read_text())["code_objects"]
    entry = entries.get(f"{arch}/{name}")
    if entry is None:
        names = sorted({e["family"] for e in entries.values() if e["arch"] == arch})
        raise FileNotFoundError(f"no test kernel {name!r} for {arch} in tests/hsaco/manifest.json "
                                f"(has: {', '.join(names) or 'none'}); {REBUILD}")
    return entry


def _read_checked(rel: str, sha256: str) -> bytes:
    path = HSACO_DIR / rel
    if not path.is_file():
        raise FileNotFoundError(f"tests/hsaco/{rel} is missing; {REBUILD}")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"tests/hsaco/{rel} does not match its sha256 in tests/hsaco/manifest.json; {REBUILD}")
    return data


def load_test_kernel(device: Device, name: str) -> tuple[Any, CodeObject]:
    """Load ``tests/hsaco/<device arch>/<name>.hsaco``; returns (module handle, parsed code object)."""
    arch = device.arch.name
    entry = _entry(arch, name)
    image = _read_checked(entry["path"], entry["sha256"])
    register_listing(image, _read_checked(entry["instructions"], entry["instructions_sha256"]))
    module = device.load_module(image)
    code = CodeObject.parse(image, f"tests/hsaco/{entry['path']}")
    _loaded[id(module)] = (module, code)
    return module, code


def _dim3(d: Dim) -> tuple[int, int, int]:
    dims = (d,) if isinstance(d, int) else tuple(d)
    if not 1 <= len(dims) <= 3 or any(not isinstance(v, int) or v < 1 for v in dims):
        raise ValueError(f"a grid or block is 1 to 3 positive ints, got {d!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def launch(device: Device, module: Any, kernel_name: str, grid: Dim, block: Dim, args: Sequence[Any],
           shared_mem: int = 0) -> Any:
    """Launch a kernel of a module from `load_test_kernel` and wait for it.

    `args` are the explicit arguments in order (device pointers as ints, scalars as ints or
    sized numpy scalars); returns the device's launch statistics when it keeps them.
    """
    found = _loaded.get(id(module))
    if found is None or found[0] is not module:
        raise ValueError("launch() needs a module returned by load_test_kernel()")
    kernel = found[1].kernel(kernel_name)
    function = device.get_function(module, kernel_name)
    g, b = _dim3(grid), _dim3(block)
    plan = make_plan(function, kernel, g, b, shared_mem)
    device.dispatch(function, g, b, plan.kernarg(args), shared_mem)
    device.synchronize()
    return getattr(device, "last_launch_stats", None)


def to_device(device: Device, array: Any) -> int:
    """A new device buffer holding a copy of `array` (C order); returns its address."""
    arr = np.ascontiguousarray(array)
    ptr = device.alloc(arr.nbytes)
    if arr.nbytes:
        device.copy_to_device(ptr, arr.reshape(-1).view(np.uint8), arr.nbytes)
    return ptr


def from_device(device: Device, ptr: int, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """A host copy of the array of `shape` and `dtype` at device address `ptr`."""
    out = np.empty(shape, dtype)
    if out.nbytes:
        device.copy_to_host(out.reshape(-1).view(np.uint8), ptr, out.nbytes)
    return out
