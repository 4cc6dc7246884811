"""Kernel launches: arguments packed and bound, from a kernel's own metadata.

`ArgPacker` turns the metadata of one kernel (explicit and hidden arguments with
their offsets and sizes) into a packer that refuses calls not matching the
signature. A `LaunchPlan` fixes grid, block and the hidden-argument block for one
shape, so a repeated call only writes the explicit values into a copy of it.
`make_launch` binds a plan's arguments by their names in the kernel source: a
`Launch` is one kernel of a bound call, ready to dispatch (`Device.dispatcher`).

Vocabulary: a *plan* is what one shape needs (kernel, grid, block, kernarg layout);
a *launch* is a plan with its arguments bound to a call's pointers and values; to
*dispatch* is what a device does with one on a stream; to *bind* a call is to
check its operands once and store the launches it runs (`operands`).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .devices.base import Device, Dispatcher
from .errors import KernelArgumentError

# Offsets of the v5/v6 implicit arguments inside the 256-byte hidden block are given
# per argument by the metadata; these are the ones a HIP runtime fills.
_HIDDEN_ZERO = {
    "hidden_global_offset_x", "hidden_global_offset_y", "hidden_global_offset_z",
    "hidden_printf_buffer", "hidden_hostcall_buffer", "hidden_multigrid_sync_arg",
    "hidden_heap_v1", "hidden_default_queue", "hidden_completion_action", "hidden_queue_ptr",
    "hidden_private_base", "hidden_shared_base", "hidden_none",
}


def _grid_dims(grid: tuple[int, int, int], block: tuple[int, int, int]) -> int:
    if grid[2] * block[2] > 1:
        return 3
    return 2 if grid[1] * block[1] > 1 else 1


@dataclass(frozen=True)
class ExplicitArg:
    index: int
    offset: int
    size: int
    kind: str                 # metadata .value_kind: "global_buffer" or "by_value"
    name: str


class ArgPacker:
    """Packs explicit kernel arguments at the offsets the kernel's metadata gives."""

    def __init__(self, kernel: Any) -> None:
        self.kernel_name: str = kernel.name
        self.size: int = int(kernel.kernarg_segment_size)
        self.explicit: tuple[ExplicitArg, ...] = tuple(
            ExplicitArg(i, a.offset, a.size, a.value_kind, a.param or f"arg{i}")
            for i, a in enumerate(kernel.explicit_args)
        )
        if len({a.name for a in self.explicit}) != len(self.explicit):
            raise KernelArgumentError(f"kernel {self.kernel_name}: argument names repeat in its metadata "
                                      f"({', '.join(a.name for a in self.explicit)})")
        self.hidden = tuple((a.offset, a.size, a.value_kind) for a in kernel.hidden_args)
        for a in self.explicit:
            if a.kind not in ("global_buffer", "by_value"):
                raise KernelArgumentError(
                    f"kernel {self.kernel_name}: argument {a.name} has kind {a.kind!r}; "
                    "hipskinny launches only pointer and by-value arguments")

    def hidden_block(self, grid: tuple[int, int, int], block: tuple[int, int, int],
                     dynamic_lds: int) -> bytearray:
        """A kernarg buffer with the hidden arguments filled as the HIP runtime does."""
        buf = bytearray(self.size)
        values = {
            "hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1],
            "hidden_block_count_z": grid[2],
            "hidden_group_size_x": block[0], "hidden_group_size_y": block[1],
            "hidden_group_size_z": block[2],
            "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
            "hidden_grid_dims": _grid_dims(grid, block),
            "hidden_dynamic_lds_size": dynamic_lds,
        }
        for offset, size, kind in self.hidden:
            if kind in values:
                buf[offset:offset + size] = int(values[kind]).to_bytes(size, "little")
            elif kind not in _HIDDEN_ZERO:
                raise KernelArgumentError(
                    f"kernel {self.kernel_name} needs hidden argument {kind!r}, which hipskinny does not provide")
        return buf

    def pack_into(self, buf: bytearray, values: Sequence[Any]) -> None:
        """Write the explicit argument values into ``buf`` (a copy of a hidden block)."""
        if len(values) != len(self.explicit):
            names = ", ".join(a.name for a in self.explicit)
            raise KernelArgumentError(
                f"kernel {self.kernel_name} takes {len(self.explicit)} arguments ({names}); got {len(values)}")
        for a, v in zip(self.explicit, values, strict=True):
            buf[a.offset:a.offset + a.size] = _encode(a, v, self.kernel_name)


def _encode(a: ExplicitArg, v: Any, kernel: str) -> bytes:
    if a.kind == "global_buffer":
        if v is None:
            v = 0
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= int(v) < 2**64:
            raise KernelArgumentError(f"kernel {kernel}: pointer argument {a.name} needs a device address "
                                      f"(int), got {v!r}")
        return int(v).to_bytes(a.size, "little")
    if isinstance(v, np.generic):
        raw = v.tobytes()
        if len(raw) != a.size:
            raise KernelArgumentError(f"kernel {kernel}: argument {a.name} is {a.size} bytes, "
                                      f"got a {len(raw)}-byte {v.dtype}")
        return raw
    if isinstance(v, bool) or not isinstance(v, int):
        raise KernelArgumentError(f"kernel {kernel}: argument {a.name} takes an int or a sized numpy "
                                  f"scalar, got {type(v).__name__}")
    lo, hi = -(2 ** (8 * a.size - 1)), 2 ** (8 * a.size)
    if not lo <= v < hi:
        raise KernelArgumentError(f"kernel {kernel}: value {v} does not fit argument {a.name} "
                                  f"({a.size} bytes)")
    return (v % hi).to_bytes(a.size, "little")


# struct codes of the explicit arguments the kernels take: (value_kind, size) -> code.
_STRUCT_CODES = {("global_buffer", 8): "Q", ("by_value", 8): "q", ("by_value", 4): "i",
                 ("by_value", 2): "h", ("by_value", 1): "b"}


def explicit_struct(packer: ArgPacker) -> struct.Struct:
    """One `struct.Struct` that writes every explicit argument at its metadata offset, so a launch
    packs its values with a single ``pack_into`` (padding bytes between arguments are zero)."""
    fmt, pos = ["<"], 0
    for a in sorted(packer.explicit, key=lambda a: a.offset):
        code = _STRUCT_CODES.get((a.kind, a.size))
        if code is None or a.offset < pos:
            raise KernelArgumentError(f"kernel {packer.kernel_name}: argument {a.name} ({a.kind}, {a.size} bytes at "
                                      f"offset {a.offset}) cannot be packed by hipskinny")
        if a.offset > pos:
            fmt.append(f"{a.offset - pos}x")
        fmt.append(code)
        pos = a.offset + a.size
    return struct.Struct("".join(fmt))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything about one launch that depends only on the shapes, not the pointers."""

    function: Any
    packer: ArgPacker
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    template: bytes           # kernarg buffer with hidden arguments filled
    info: dict[str, Any]      # op-specific facts (chosen config) for tests and benchmarks
    args: struct.Struct       # packs the explicit arguments in one call (see `explicit_struct`)

    def kernarg(self, values: Sequence[Any]) -> bytes:
        buf = bytearray(self.template)
        self.packer.pack_into(buf, values)
        return bytes(buf)


def threads(kernel_meta: Any) -> int:
    """The workgroup size a kernel runs with: its launch bound (every hipskinny kernel is written for
    exactly the block its ``__launch_bounds__`` names, which the code object's metadata records)."""
    return int(kernel_meta.max_flat_workgroup_size)


def make_plan(function: Any, kernel_meta: Any, grid: tuple[int, int, int], block: tuple[int, int, int] | None = None,
              shared_mem: int = 0, info: dict[str, Any] | None = None,
              packer: ArgPacker | None = None) -> LaunchPlan:
    """``block`` None: ``(threads(kernel_meta), 1, 1)``."""
    packer = packer or ArgPacker(kernel_meta)
    limit = threads(kernel_meta)
    block = block or (limit, 1, 1)
    size = block[0] * block[1] * block[2]
    if size > limit:
        raise KernelArgumentError(f"kernel {kernel_meta.name}: block of {size} threads exceeds its "
                                  f"launch bound of {limit}")
    return LaunchPlan(function, packer, grid, block, shared_mem,
                      bytes(packer.hidden_block(grid, block, shared_mem)), info or {}, explicit_struct(packer))


# ----------------------------------------------------------------------------------------------
# binding a plan's arguments by name


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a bound call, made by `make_launch` from the kernel's argument names. The
    kernel takes pointer arguments, then values; ``select`` are the positions of its pointers among
    the call's (inputs, results, then scratch slots; -1: a null pointer), ``tail`` the rest, in the
    kernel's order. ``prefix`` >= 0 says ``select`` is the first ``prefix`` positions (the usual case,
    a slice on the per-call path)."""

    dispatch: Dispatcher
    select: tuple[int, ...]
    tail: tuple
    prefix: int = -1

    def args(self, ptrs: list[int]) -> list[int]:
        if self.prefix >= 0:
            return ptrs if self.prefix == len(ptrs) else ptrs[:self.prefix]
        return [ptrs[i] if i >= 0 else 0 for i in self.select]


def make_launch(device: Device, plan: LaunchPlan, pointers: Sequence[str], **args: Any) -> Launch:
    """The launch of ``plan`` with every kernel argument given by its name in the kernel source: a str
    names one of the call's pointers (``pointers``: their names in the call's order), None is a null
    pointer, anything else a value. Checked here, once per bound call, against the kernel's metadata:
    every argument given, no other, pointers where the kernel takes pointers."""
    kernel, params = plan.packer.kernel_name, plan.packer.explicit
    names = [a.name for a in params]
    missing, unknown = [n for n in names if n not in args], [n for n in args if n not in names]
    if missing or unknown:
        raise KernelArgumentError(f"kernel {kernel} takes ({', '.join(names)})"
                                  + (f"; missing {', '.join(missing)}" if missing else "")
                                  + (f"; it has no {', '.join(unknown)}" if unknown else ""))
    sourced = [i for i, a in enumerate(params) if isinstance(args[a.name], str)]
    split = sourced[-1] + 1 if sourced else 0       # pointers taken from the call, then the tail
    select: list[int] = []
    for a in params[:split]:
        v = args[a.name]
        if a.kind != "global_buffer" or not (v is None or isinstance(v, str)):
            raise KernelArgumentError(f"kernel {kernel}: {a.name} comes after the pointers the call passes, "
                                      f"so it must be a pointer ({a.kind} given {v!r})")
        if v is not None and v not in pointers:
            raise KernelArgumentError(f"kernel {kernel}: {a.name} = {v!r}, which is none of the call's pointers "
                                      f"({', '.join(pointers)})")
        select.append(-1 if v is None else pointers.index(v))
    tail = []
    for a in params[split:]:
        v = args[a.name]
        if a.kind == "global_buffer" and v is not None:
            raise KernelArgumentError(f"kernel {kernel}: pointer {a.name} takes one of the call's pointers by "
                                      f"name, or None; got {v!r}")
        tail.append(0 if v is None else v)
    prefix = len(select) if select == list(range(len(select))) else -1
    return Launch(device.dispatcher(plan), tuple(select), tuple(tail), prefix)


# Caches keyed by device (plans here, bound calls in `operands`) keep alive every device they hold an
# entry for, and with it its loaded code objects and memory (an emulated device's are hundreds of MB).
# A process drives a few devices for its whole life (a node has up to 8 GPUs), so the caches hold
# entries for at most MAX_CACHED_DEVICES of them: an entry for one more empties every such cache, and the devices no one
# else holds can go. (A process that uses more devices than that, in turn, re-plans on each switch.)
MAX_CACHED_DEVICES = 8
_cached_devices: dict[int, Any] = {}               # id -> device, for the devices the caches hold
_device_caches: list[Any] = []                     # every cache keyed by device: its ``clear()``
_devices_lock = threading.Lock()


def note_devices(*objs: Any) -> None:
    """Before a device-keyed cache stores an entry that holds ``objs`` (a key's parts, a bound call):
    count the devices among them, and empty every such cache first if they are one too many. Never
    call it holding a cache's lock (emptying takes each)."""
    new = [o for o in objs if isinstance(o, Device) and _cached_devices.get(id(o)) is not o]
    if not new:
        return
    with _devices_lock:
        new = [o for o in new if _cached_devices.get(id(o)) is not o]
        if len(_cached_devices) + len(new) > MAX_CACHED_DEVICES:
            _cached_devices.clear()
            for cache in _device_caches:
                cache.clear()
        for o in new:
            _cached_devices[id(o)] = o


def device_caches() -> list[Any]:
    """The device-keyed caches `note_devices` empties (a new such cache appends itself)."""
    return _device_caches


def forget_devices() -> None:
    """Empty every device-keyed cache (and so let go of every device they held)."""
    with _devices_lock:
        _cached_devices.clear()
        for cache in _device_caches:
            cache.clear()


class PlanCache:
    """A small LRU of launch plans keyed by everything that decides them, the device among them
    (thread-safe; it holds at most `MAX_CACHED_DEVICES` devices with every other such cache)."""

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._plans: OrderedDict[Hashable, LaunchPlan] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0
        _device_caches.append(self)

    def get(self, key: Hashable, build: Callable[[], LaunchPlan]) -> LaunchPlan:
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
            self.misses += 1
        plan = build()          # outside the lock: building may load a module (slow, takes other locks)
        note_devices(*(key if isinstance(key, tuple) else (key,)))
        with self._lock:
            plan = self._plans.setdefault(key, plan)
            if len(self._plans) > self.maxsize:
                self._plans.popitem(last=False)
        return plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

