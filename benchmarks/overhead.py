"""Python-side cost of one call: what the frontend spends (validation, planning from the
cache, argument packing) with the device's launch and copies replaced by no-ops, next to
a bare torch op dispatch measured in the same run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import hipskinny
from hipskinny.devices.base import Device, DeviceProperties


class NullDevice(Device):
    """A gfx942 whose memory, copies and launches do nothing (the code object's metadata is
    still read, so argument packing is the real one)."""

    kind = "null"

    def __init__(self, arch: str = "gfx942", cus: int = 304) -> None:
        self._props = DeviceProperties("null", arch, cus, 65536, 64, 1 << 34)
        self._next = 0x1000

    @property
    def properties(self) -> DeviceProperties:
        return self._props

    def alloc(self, nbytes: int) -> int:
        ptr = self._next
        self._next += -(-max(nbytes, 1) // 4096) * 4096
        return ptr

    def free(self, ptr: int) -> None:
        pass

    def copy_to_device(self, dst: int, src: Any, nbytes: int, stream: int = 0) -> None:
        pass

    def copy_to_host(self, dst: Any, src: int, nbytes: int, stream: int = 0) -> None:
        pass

    def memset(self, ptr: int, value: int, nbytes: int, stream: int = 0) -> None:
        pass

    def load_module(self, image: bytes) -> Any:
        return "module"

    def get_function(self, module: Any, name: str) -> Any:
        return name

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], kernarg: bytes,
               shared_mem: int = 0, stream: int = 0) -> None:
        pass

    def synchronize(self, stream: int = 0) -> None:
        pass


def _us_per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Median over 5 rounds of the mean µs per call (the machine is shared: the median
    resists another process's bursts)."""
    fn()
    n = 1
    while True:                           # calibrate a round to ~seconds / 5
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt > seconds / 50 or n > 1 << 20:
            break
        n *= 2
    n = max(1, int(n * (seconds / 5) / max(dt, 1e-9)))
    rounds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t) / n * 1e6)
    return sorted(rounds)[2]


def measure(families: list[str], seconds: float = 1.0, n: int = 1, m: int = 256, k: int = 4096) -> dict[str, Any]:
    """µs per call for each family on host operands (numpy, and torch CPU tensors when torch is
    installed), and a bare torch dispatch. Host operands go through the staging path, whose
    copies are no-ops here; GPU-resident tensors skip staging altogether."""
    out: dict[str, Any] = {"shape": {"n": n, "m": m, "k": k}, "families": {}}
    dev = NullDevice()
    x = np.ones((n, k), np.float16)
    w = np.ones((m, k), np.float16)
    torch: Any
    try:
        import torch
    except ImportError:                   # torch is optional
        torch = None
    with hipskinny.on_device(dev):
        for family in families:
            fn = getattr(hipskinny, family)
            xa = x[0] if family == "gemv" else x
            row = {"numpy_us": _us_per_call(lambda fn=fn, xa=xa: fn(xa, w), seconds)}
            if torch is not None:
                xt, wt = torch.from_numpy(np.ascontiguousarray(xa)), torch.from_numpy(w)
                row["torch_cpu_us"] = _us_per_call(lambda fn=fn, xt=xt, wt=wt: fn(xt, wt), seconds)
            out["families"][family] = row
    if torch is not None:
        a = torch.ones(1)
        out["torch"] = {"version": torch.__version__,
                        "add_us": _us_per_call(lambda: torch.add(a, a), seconds)}
        xs, ws = torch.ones((1, 8)), torch.ones((8, 8))
        out["torch"]["linear_1x8x8_us"] = _us_per_call(lambda: torch.nn.functional.linear(xs, ws), seconds)
    return out
