"""Reusable device memory per (device, stream): staging buffers, split-K partials, counters.

A pool hands out named slots. A slot grows (to the next power of two) only when a
call needs more than it holds, and is zeroed once when it is allocated; kernels
that use counters leave them zeroed (self-cleaning), so nothing is allocated or
cleared on the hot path once the shapes have been seen.
"""

from __future__ import annotations

import threading
import weakref

from .devices.base import Device

_ALIGN = 256


class ScratchPool:
    def __init__(self, device: Device, stream: int) -> None:
        self.device = device
        self.stream = stream
        self._slots: dict[str, tuple[int, int]] = {}   # name -> (address, capacity)
        self.allocations = 0                              # how often the pool had to grow

    def buffer(self, name: str, nbytes: int) -> int:
        """A device address of at least ``nbytes`` for slot ``name`` (contents persist)."""
        slot = self._slots.get(name)
        if slot is not None and slot[1] >= nbytes:
            return slot[0]
        capacity = max(_ALIGN, 1 << max(nbytes - 1, 0).bit_length())
        if slot is not None:
            self.device.synchronize(self.stream)   # earlier launches may still use it
            self.device.free(slot[0])
        ptr = self.device.alloc(capacity)
        self.device.memset(ptr, 0, capacity, self.stream)
        self._slots[name] = (ptr, capacity)
        self.allocations += 1
        return ptr

    def capacity(self, name: str) -> int:
        slot = self._slots.get(name)
        return slot[1] if slot else 0

    def release(self) -> None:
        self.device.synchronize(self.stream)
        for ptr, _ in self._slots.values():
            self.device.free(ptr)
        self._slots.clear()


_lock = threading.Lock()
_pools: weakref.WeakKeyDictionary[Device, dict[int, ScratchPool]] = weakref.WeakKeyDictionary()


def pool(device: Device, stream: int = 0) -> ScratchPool:
    """The pool of (device, stream), created on first use."""
    per_device = _pools.get(device)
    if per_device is not None and stream in per_device:
        return per_device[stream]
    with _lock:
        per_device = _pools.setdefault(device, {})
        if stream not in per_device:
            per_device[stream] = ScratchPool(device, stream)
        return per_device[stream]
