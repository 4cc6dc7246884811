"""The device interface every backend implements (HIP runtime or emulator).

Addresses are plain ints. Streams are opaque ints (0 = the default stream).
A device never allocates behind the caller's back: ops get memory from the
scratch pool, which calls `alloc` only when it has to grow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..arch import ArchInfo, arch_info

# A plan made ready to dispatch: ``dispatch(pointers, tail, stream)`` packs the explicit arguments -- the
# first ``len(pointers)`` of them from ``pointers``, the rest from ``tail`` -- and dispatches the kernel.
Dispatcher = Callable[[Sequence[int], tuple, int], None]


@dataclass(frozen=True)
class DeviceProperties:
    name: str                 # marketing name or "emulated gfx942"
    gcn_arch_name: str        # as the runtime reports it, features included
    cu_count: int             # multiProcessorCount
    lds_per_workgroup: int    # sharedMemPerBlock
    wave_size: int            # warpSize
    total_memory: int         # bytes


class Device(ABC):
    """One GPU (real or emulated): memory, code objects, launches, streams."""

    kind: str = "device"      # "hip" or "emulator"
    ordinal: int = 0

    @property
    @abstractmethod
    def properties(self) -> DeviceProperties: ...

    @property
    def arch(self) -> ArchInfo:
        info = self.__dict__.get("_arch_info")
        if info is None:   # parsed once per device: callers read it on every plan
            info = self.__dict__["_arch_info"] = arch_info(self.properties.gcn_arch_name)
        return info

    @property
    def label(self) -> str:
        """A short name for messages: ``hip:0`` or ``emulator:gfx942``."""
        return f"{self.kind}:{self.ordinal}"

    # memory -----------------------------------------------------------------
    @abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abstractmethod
    def free(self, ptr: int) -> None: ...

    @abstractmethod
    def copy_to_device(self, dst: int, src: Any, nbytes: int, stream: int = 0) -> None:
        """Copy ``nbytes`` from a host buffer (anything with the buffer protocol)."""

    @abstractmethod
    def copy_to_host(self, dst: Any, src: int, nbytes: int, stream: int = 0) -> None:
        """Copy ``nbytes`` into a writable host buffer."""

    @abstractmethod
    def memset(self, ptr: int, value: int, nbytes: int, stream: int = 0) -> None: ...

    # code objects and launches ----------------------------------------------
    @abstractmethod
    def load_module(self, image: bytes) -> Any:
        """Load a code object; returns an opaque module handle."""

    @abstractmethod
    def get_function(self, module: Any, name: str) -> Any:
        """Look up a kernel in a loaded module; returns an opaque function handle."""

    @abstractmethod
    def dispatch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
                 kernarg: bytes, shared_mem: int = 0, stream: int = 0) -> None:
        """Send a kernel to ``stream`` with a packed kernarg buffer laid out by its metadata."""

    @abstractmethod
    def synchronize(self, stream: int = 0) -> None: ...

    def dispatcher(self, plan: Any) -> Dispatcher:   # plan: a `launch.LaunchPlan` (launch imports this module)
        """``plan`` made ready to dispatch: everything that does not change between calls (function,
        grid, block, hidden arguments) is checked and fixed once; a call packs the explicit values."""
        function, grid, block, shared_mem = plan.function, plan.grid, plan.block, plan.shared_mem
        template, pack = plan.template, plan.args.pack_into
        plan.packer.pack_into(bytearray(template), [0] * len(plan.packer.explicit))  # arity checked once

        def dispatch(pointers: Sequence[int], tail: tuple, stream: int = 0) -> None:
            buf = bytearray(template)
            pack(buf, 0, *pointers, *tail)
            self.dispatch(function, grid, block, bytes(buf), shared_mem, stream)

        return dispatch

    def is_capturing(self, stream: int = 0) -> bool:
        """Is ``stream`` being captured into a graph? (Devices without graphs: never.)"""
        return False
