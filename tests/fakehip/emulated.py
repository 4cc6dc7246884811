"""Carry out the fake HIP runtime's kernel launches on the CPU emulator, in-process.

`install(arch)` registers a launch hook with the fake libamdhip64 (the same library
hip-python opened: dlopen returns the loaded handle). The runtime's hipMalloc
memory is ordinary host memory; before each launch the emulator mirrors the live
allocations, so kernels read and write exactly the bytes hipMemcpy moves, and any
access outside them faults. Tests only.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import traceback
from typing import Any

from fakehip.scenario import LAUNCH_HOOK, fake_library, live_allocations
from hipskinny.emulator import EmulatedDevice

HIP_ERROR_LAUNCH_FAILURE = 719


class EmulatedRuntime:
    def __init__(self, arch: str, cu_count: int | None) -> None:
        self.device = EmulatedDevice(arch, cu_count, host_backed=True)
        self.lib = fake_library()
        self.modules: dict[str, Any] = {}
        self.errors: list[str] = []
        self._hook = LAUNCH_HOOK(self._launch)    # keep the C callback alive
        self.lib.fakehip_set_launch_hook(self._hook, None)

    def _launch(self, kernel: bytes, image: int, image_size: int, gx: int, gy: int, gz: int, bx: int, by: int,
                bz: int, shared: int, stream: int, kernarg: int, kernarg_size: int, user: int) -> int:
        try:
            data = ctypes.string_at(image, image_size)
            key = hashlib.sha256(data).hexdigest()
            if key not in self.modules:
                self.modules[key] = self.device.load_module(data)
            self.device.memory.sync_external(live_allocations(self.lib))
            fn = self.device.get_function(self.modules[key], kernel.decode())
            self.device.dispatch(fn, (gx, gy, gz), (bx, by, bz), ctypes.string_at(kernarg, kernarg_size), shared)
            return 0
        except Exception:  # report through HIP's error path, keep the details for the test
            self.errors.append(traceback.format_exc())
            return HIP_ERROR_LAUNCH_FAILURE


def install(arch: str | None = None, cu_count: int | None = None) -> EmulatedRuntime:
    arch = arch or os.environ.get("FAKEHIP_ARCH", "gfx942").split(",")[0].split(":")[0]
    cus = cu_count or int(os.environ.get("FAKEHIP_CU_COUNT", "0").split(",")[0] or 0) or None
    return EmulatedRuntime(arch, cus)
