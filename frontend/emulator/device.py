"""`EmulatedDevice`: the device interface on top of the CPU emulator."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from ..arch import arch_info
from ..codeobject import CodeObject, Kernel
from ..devices.base import Device, DeviceProperties
from ..errors import EmulatorError
from .dispatch import DEFAULT_MAX_WAVE_STEPS, run_launch
from .listing import as_table
from .memory import Memory
from .program import Program
from .stats import LaunchStats

_extra_tables: dict[str, bytes] = {}

# Code objects sit at one address per code object in every (not host-backed) emulated device of the
# process, below where the data allocations start (`memory._BASE`): so one decoded `Program` -- its
# handlers bake in where the image is -- and one read-only copy of the image serve every device.
# Devices of an arch load the same few code objects; a program per device cost tens of MB each.
_CODE_BASE = 0x7E0000000000
_code_lock = threading.Lock()
_code_slots: dict[str, int] = {}                         # image sha256 -> its base address
_code_next = _CODE_BASE
_shared: weakref.WeakValueDictionary[str, _SharedCode] = weakref.WeakValueDictionary()


def register_listing(image: bytes, listing: bytes | str) -> None:
    """Make the instructions of a code object that is not shipped (tests) known: its instruction
    table (``.itab``, as build_scripts writes it) or its ``llvm-objdump -d`` listing (text, or
    gzip'ed bytes)."""
    _extra_tables[hashlib.sha256(image).hexdigest()] = as_table(listing)


@functools.cache
def _shipped() -> dict[str, dict[str, Any]]:
    """The shipped code objects' manifest entries by the sha256 of their bytes."""
    text = resources.files("hipskinny.hsaco").joinpath("manifest.json").read_text()
    return {e["sha256"]: e for e in json.loads(text)["code_objects"].values()}


def _table_for(image: bytes) -> bytes:
    digest = hashlib.sha256(image).hexdigest()
    if digest in _extra_tables:
        return _extra_tables[digest]
    entry = _shipped().get(digest)
    if entry is not None:
        data = resources.files("hipskinny.hsaco").joinpath(entry["instructions"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["instructions_sha256"]:
            raise EmulatorError(f"instruction table {entry['instructions']} does not match the manifest; "
                                "reinstall hipskinny")
        return data
    raise EmulatorError("the emulator decodes from the instruction table shipped with each code object; "
                        "this code object is not in hipskinny's manifest (register_listing() adds others)")


def _host_bytes(buf: Any) -> np.ndarray:
    """A flat uint8 view of a contiguous host buffer (numpy of any dtype, incl. ml_dtypes)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise EmulatorError("host buffers for copies must be contiguous")
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(buf).cast("B"), np.uint8) if memoryview(buf).readonly else \
        np.asarray(memoryview(buf).cast("B"))


class _SharedCode:
    """A code object's image bytes as every device maps them, and its decoded program (kept while a
    device holds a module of it)."""

    __slots__ = ("image", "program", "__weakref__")

    def __init__(self, image: np.ndarray, program: Program) -> None:
        self.image, self.program = image, program


def _image_bytes(code: CodeObject) -> np.ndarray:
    """The code object's load segments laid out from vaddr 0, as a device's memory holds them."""
    mapped = np.zeros(max(code.image_size, 1), np.uint8)
    for seg in code.load_segments:
        mapped[seg.vaddr:seg.vaddr + seg.memsz] = np.frombuffer(code.segment_bytes(seg), np.uint8)
    return mapped


def _shared_code(image: bytes, code: CodeObject) -> tuple[int, _SharedCode]:
    """(base address, shared image and program) of a code object, made by its first load."""
    global _code_next
    digest = hashlib.sha256(image).hexdigest()
    with _code_lock:
        base = _code_slots.get(digest)
        if base is None:
            base = _code_slots[digest] = _code_next
            _code_next += -(-max(code.image_size, 1) // 4096) * 4096 + (1 << 20)   # page-aligned, with a gap
        found = _shared.get(digest)
        if found is None:
            mapped = _image_bytes(code)
            mapped.flags.writeable = False        # kernels never write their code: a write faults
            found = _shared[digest] = _SharedCode(mapped, Program(code, _table_for(image), arch_info(code.arch),
                                                                 image_base=base))
    return base, found


@dataclass
class EmulatedModule:
    code: CodeObject
    program: Program
    base: int                    # where the image's vaddr 0 lives in emulated memory
    shared: _SharedCode | None = None     # what keeps the shared image and program alive


class EmulatedDevice(Device):
    """A GPU of a shipped arch, emulated on the CPU: real code objects, checked memory."""

    kind = "emulator"

    def __init__(self, arch: str = "gfx942", num_cus: int | None = None, *, seed: int | None = None,
                 strict_lds: bool = False, max_wave_steps: int = DEFAULT_MAX_WAVE_STEPS,
                 host_backed: bool = False, lockstep: bool = True) -> None:
        """`lockstep=False` runs each wave alone between barriers instead of the waves of a
        workgroup together (same results for a race-free kernel; kept to compare against)."""
        info = arch_info(arch)
        self.memory = Memory(host_backed)
        self.seed = seed                      # None: deterministic schedule; int: shuffled, seeded
        self.strict_lds = strict_lds
        self.max_wave_steps = max_wave_steps
        self.lockstep = lockstep
        self._props = DeviceProperties(name=f"emulated {info.name}", gcn_arch_name=info.name,
                                       cu_count=num_cus or info.default_cu_count,
                                       lds_per_workgroup=info.lds_per_workgroup, wave_size=info.wave_size,
                                       total_memory=64 << 30)
        self.launches: deque[LaunchStats] = deque(maxlen=64)
        self._queue = self.memory.alloc(256, "queue")
        self._kernarg = (0, 0)             # (address, capacity) reused across launches
        self._packet = self.memory.alloc(64, "dispatch packet")
        # Everything a stream does (launches, copies, memsets) runs to completion when it is enqueued,
        # one at a time on the whole device: so work on one stream runs in enqueue order, never
        # interleaved, whichever thread enqueued it (HIP's ordering; streams need not overlap). The
        # launches also share the kernarg buffer and the dispatch packet.
        self._launch_lock = threading.Lock()

    @property
    def properties(self) -> DeviceProperties:
        return self._props

    @property
    def label(self) -> str:
        return f"emulator:{self._props.gcn_arch_name}"

    @property
    def last_launch_stats(self) -> LaunchStats | None:
        return self.launches[-1] if self.launches else None

    # memory ---------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        with self._launch_lock:
            return self.memory.alloc(nbytes)

    def free(self, ptr: int) -> None:
        with self._launch_lock:
            self.memory.free(ptr)

    def copy_to_device(self, dst: int, src: Any, nbytes: int, stream: int = 0) -> None:
        data = _host_bytes(src)[:nbytes]
        with self._launch_lock:
            self.memory.view(dst, nbytes)[:] = data

    def copy_to_host(self, dst: Any, src: int, nbytes: int, stream: int = 0) -> None:
        out = _host_bytes(dst)
        if not out.flags.writeable:
            raise EmulatorError("copy_to_host into a read-only buffer")
        with self._launch_lock:
            out[:nbytes] = self.memory.view(src, nbytes)

    def memset(self, ptr: int, value: int, nbytes: int, stream: int = 0) -> None:
        with self._launch_lock:
            self.memory.view(ptr, nbytes)[:] = value & 0xFF

    # code objects -------------------------------------------------------------------
    def load_module(self, image: bytes) -> EmulatedModule:
        image = bytes(image)
        code = CodeObject.parse(image)
        if code.arch != self._props.gcn_arch_name:
            raise EmulatorError(f"code object for {code.arch} cannot run on the emulated {self._props.gcn_arch_name}")
        if not self.memory.host_backed:
            base, shared = _shared_code(image, code)
            with self._launch_lock:     # mapped as a copy would be written: between launches
                if self.memory.find(base, len(shared.image)) is None:
                    self.memory.register(base, shared.image, f"code object {code.arch}")
            return EmulatedModule(code, shared.program, base, shared)
        # host-backed memory lives at host addresses: the image goes where the host allocates it
        with self._launch_lock:
            base = self.memory.alloc(code.image_size, f"code object {code.arch}", align=4096)
            self.memory.view(base, code.image_size)[:] = _image_bytes(code)[:code.image_size]
        return EmulatedModule(code, Program(code, _table_for(image), arch_info(code.arch), image_base=base), base)

    def get_function(self, module: EmulatedModule, name: str) -> tuple[EmulatedModule, Kernel]:
        return module, module.code.kernel(name)

    def dispatch(self, function: tuple[EmulatedModule, Kernel], grid: tuple[int, int, int],
                 block: tuple[int, int, int], kernarg: bytes, shared_mem: int = 0, stream: int = 0) -> None:
        with self._launch_lock:
            self._launch(function, grid, block, kernarg, shared_mem)

    def _launch(self, function: tuple[EmulatedModule, Kernel], grid: tuple[int, int, int],
                block: tuple[int, int, int], kernarg: bytes, shared_mem: int) -> None:
        module, kernel = function
        if len(kernarg) < kernel.kernarg_segment_size:
            raise EmulatorError(f"kernel {kernel.name} needs {kernel.kernarg_segment_size} kernarg bytes, "
                                f"got {len(kernarg)}")
        addr, cap = self._kernarg
        if cap < len(kernarg):
            if cap:
                self.memory.free(addr)
            cap = max(4096, len(kernarg))
            addr = self.memory.alloc(cap, "kernarg")
            self._kernarg = (addr, cap)
        self.memory.view(addr, len(kernarg))[:] = np.frombuffer(kernarg, np.uint8)
        self._write_packet(module, kernel, grid, block, shared_mem, addr)
        stats = run_launch(module.program, kernel, self.memory, grid, block, addr, self._packet, self._queue,
                           shared_mem, seed=self.seed, strict_lds=self.strict_lds,
                           max_wave_steps=self.max_wave_steps, lockstep=self.lockstep)
        self.launches.append(stats)

    def _write_packet(self, module: EmulatedModule, kernel: Kernel, grid: tuple[int, int, int],
                      block: tuple[int, int, int], shared_mem: int, kernarg_addr: int) -> None:
        p = bytearray(64)
        dims = 3 if grid[2] * block[2] > 1 else 2 if grid[1] * block[1] > 1 else 1
        p[0:2] = (2).to_bytes(2, "little")                    # HSA_PACKET_TYPE_KERNEL_DISPATCH
        p[2:4] = dims.to_bytes(2, "little")
        for i in range(3):
            p[4 + 2 * i:6 + 2 * i] = block[i].to_bytes(2, "little")
            p[12 + 4 * i:16 + 4 * i] = (grid[i] * block[i]).to_bytes(4, "little")
        p[24:28] = kernel.private_segment_fixed_size.to_bytes(4, "little")
        p[28:32] = (kernel.group_segment_fixed_size + shared_mem).to_bytes(4, "little")
        p[32:40] = (module.base + kernel.descriptor_address).to_bytes(8, "little")
        p[40:48] = kernarg_addr.to_bytes(8, "little")
        self.memory.view(self._packet, 64)[:] = np.frombuffer(bytes(p), np.uint8)

    def synchronize(self, stream: int = 0) -> None:
        return None
