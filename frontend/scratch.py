"""Reusable device memory per (device, stream): staging buffers, split-K partials, counters.

A pool hands out named slots. A slot grows (to the next power of two) only when a call
needs more than it holds, and is zeroed once when it is allocated; kernels that use
counters leave them zeroed (self-cleaning), so nothing is allocated or cleared on the hot
path once the shapes have been seen.

HIP graphs: a captured launch keeps the scratch addresses it was captured with for the life
of the graph. So a slot that grows is *retired*, never freed (nor its address reused) while
the process lives -- the sum of a slot's retired sizes is below its current size, as sizes
double -- and nothing is allocated, cleared or synchronized while the pool's stream is being
captured: a call that would need more scratch then raises `CaptureError` telling how to warm
up (`reserve`). `ScratchPool.release` frees everything, retired slots included; it refuses
during a capture, and graphs captured before it must not be replayed after it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .devices.base import Device
from .errors import CaptureError, HipSkinnyError, InputTypeError

_ALIGN = 256
WARM_UP_HINT = ("warm up before capturing: run the same calls once outside the capture on the stream you "
                "capture on, or call hipskinny.reserve(stream) after a warm-up on another stream")


class ScratchPool:
    def __init__(self, device: Device, stream: int) -> None:
        # weakly: `_pools` is keyed weakly by the device, which a strong reference here would keep alive
        self._device = weakref.ref(device)
        self.stream = stream
        self._slots: dict[str, tuple[int, int]] = {}   # name -> (address, capacity)
        self._retired: list[tuple[int, int]] = []        # outgrown slots: kept for captured graphs
        self.allocations = 0                              # how often the pool had to grow
        # Growth, a host call's whole stage-launch-copy sequence, and the launches of a device call
        # that pass data through scratch (operands.DeviceCall) hold this lock: threads sharing a
        # stream must not overwrite each other's staged inputs or intermediate results.
        self.lock = threading.RLock()

    @property
    def device(self) -> Device:
        device = self._device()
        if device is None:
            raise HipSkinnyError("the device of this scratch pool is gone")
        return device

    def buffer(self, name: str, nbytes: int) -> int:
        """A device address of at least ``nbytes`` for slot ``name`` (contents persist)."""
        slot = self._slots.get(name)
        if slot is not None and slot[1] >= nbytes:
            return slot[0]
        with self.lock:
            slot = self._slots.get(name)
            if slot is not None and slot[1] >= nbytes:
                return slot[0]
            if self.device.is_capturing(self.stream):
                have = slot[1] if slot else 0
                raise CaptureError(
                    f"scratch slot {name!r} on {self.device.label} stream {self.stream:#x} needs {nbytes} bytes "
                    f"but holds {have}, and the stream is being captured into a graph, where nothing may be "
                    f"allocated; {WARM_UP_HINT}")
            capacity = max(_ALIGN, 1 << max(nbytes - 1, 0).bit_length())
            ptr = self.device.alloc(capacity)
            self.device.memset(ptr, 0, capacity, self.stream)
            if slot is not None:
                self._retired.append(slot)    # a captured graph or a launch in flight may still use it
            self._slots[name] = (ptr, capacity)
            self.allocations += 1
            return ptr

    def capacity(self, name: str) -> int:
        slot = self._slots.get(name)
        return slot[1] if slot else 0

    def read(self, name: str, out: Any) -> bool:
        """Copy the first ``out.nbytes`` of slot ``name`` into ``out`` after the stream's work is
        done (synchronizes); False, ``out`` untouched, when the slot does not exist yet."""
        slot = self._slots.get(name)
        if slot is None:
            return False
        self.device.synchronize(self.stream)
        self.device.copy_to_host(out, slot[0], min(out.nbytes, slot[1]))
        return True

    def capacities(self) -> dict[str, int]:
        return {name: cap for name, (_, cap) in self._slots.items()}

    def addresses(self) -> dict[str, int]:
        """Each live slot's device address by name (for tools that name the buffers a launch read)."""
        return {name: ptr for name, (ptr, _) in self._slots.items()}

    @property
    def retired_bytes(self) -> int:
        return sum(cap for _, cap in self._retired)

    def release(self) -> None:
        """Free every slot, retired ones included (after the stream's work is done). Refused while
        the stream is being captured; graphs captured with this pool must not run afterwards."""
        with self.lock:
            if self.device.is_capturing(self.stream):
                raise CaptureError(f"release() during a graph capture on {self.device.label} stream "
                                   f"{self.stream:#x}: the capture may reference this scratch; end the "
                                   "capture (and destroy graphs that use the pool) first")
            self.device.synchronize(self.stream)
            for ptr, _ in (*self._slots.values(), *self._retired):
                self.device.free(ptr)
            self._slots.clear()
            self._retired.clear()
        for forget in _release_hooks:
            forget(self.device)


_lock = threading.Lock()
_pools: weakref.WeakKeyDictionary[Device, dict[int, ScratchPool]] = weakref.WeakKeyDictionary()
_release_hooks: list[Callable[[Device], None]] = []


def on_release(hook: Callable[[Device], None]) -> None:
    """Call ``hook(device)`` after a pool of ``device`` freed its memory (caches of addresses forget them)."""
    _release_hooks.append(hook)


def pool(device: Device, stream: int = 0) -> ScratchPool:
    """The pool of (device, stream), created on first use."""
    per_device = _pools.get(device)
    if per_device is not None:
        found = per_device.get(stream)
        if found is not None:
            return found
    with _lock:
        per_device = _pools.setdefault(device, {})
        if stream not in per_device:
            per_device[stream] = ScratchPool(device, stream)
        return per_device[stream]


def pools(device: Device) -> list[ScratchPool]:
    """Every pool of ``device`` so far."""
    with _lock:
        return list(_pools.get(device, {}).values())


def reserve(stream: Any = None, *, device: Any = None, nbytes: dict[str, int] | None = None) -> dict[str, int]:
    """Size the scratch of ``stream`` so that calls captured on it into a HIP graph allocate nothing.

    Every slot of the stream's pool grows to at least the size the same slot reached in any pool of
    the device (so a warm-up on another stream counts), and to ``nbytes[name]`` for slots named
    there. ``stream``: a HIP stream handle (int, default 0) or a torch stream (its ``cuda_stream``
    and device are used); ``device``: a `Device`, a spec such as ``"hip:1"``, or None for the
    stream's device, else this thread's current device. Returns the pool's slot capacities.
    Call it outside the capture, after a warm-up (``hipskinny.reserve`` is this function)."""
    from .devices import current_device, hip_device, parse_device

    handle = 0 if stream is None else getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise InputTypeError(f"reserve: stream must be a HIP stream handle (int) or a torch stream, got {stream!r}")
    if device is not None:
        dev = parse_device(device)
    elif getattr(stream, "device_index", None) is not None:
        dev = hip_device(int(stream.device_index))
    else:
        dev = current_device()
    wanted: dict[str, int] = {}
    for other in pools(dev):
        for name, cap in other.capacities().items():
            wanted[name] = max(wanted.get(name, 0), cap)
    for name, size in (nbytes or {}).items():
        wanted[name] = max(wanted.get(name, 0), int(size))
    target = pool(dev, handle)
    for name, size in sorted(wanted.items()):
        target.buffer(name, size)
    return target.capacities()
