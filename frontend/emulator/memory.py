"""Emulated device memory: a set of allocations, every lane's access bounds-checked.

Allocations are numpy byte arrays at addresses of a sparse 64-bit space; memory
that already exists (host buffers handed in by the fake HIP runtime in tests) can
be registered at its own address. An access by an active lane that does not fall
entirely inside one allocation raises `EmulatorFault` naming kernel, pc, lane,
address and the nearest allocation.

Thread-safe: changes to the set of allocations are serialized and published whole (the sorted
bases and their allocations as one tuple, replaced, never edited), so a lookup -- a host copy
racing an allocation in another thread, or a kernel -- never sees a half-made change.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import EmulatorFault

_BASE = 0x7F0000000000      # first address handed out (far from 0, so null pointers fault)
_GAP = 0x10000              # unmapped guard between allocations


@dataclass
class Allocation:
    base: int
    data: np.ndarray        # uint8, len = size
    label: str
    _windows: dict[int, tuple[np.ndarray, np.uint64, np.uint64]] = field(default_factory=dict, repr=False,
                                                                         compare=False)

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def window(self, size: int) -> tuple[np.ndarray, np.uint64, np.uint64, np.ndarray | None]:
        """(view whose row k is bytes k..k+size-1, base, last row, `blocks`) for lane accesses of
        `size` bytes."""
        w = self._windows.get(size)
        if w is None:
            st = self.data.strides[0]
            w = self._windows[size] = (as_strided(self.data, (len(self.data) - size + 1, size), (st, st)),
                                       np.uint64(self.base), np.uint64(len(self.data) - size),
                                       blocks(self.data, size) if st == 1 else None)
        return w


def blocks(data: np.ndarray, size: int) -> np.ndarray | None:
    """Contiguous bytes `data` as rows of `size` (2, 4, 8 or 16) bytes: accesses at offsets that are
    multiples of `size` read and write them with one `take` / one assignment (`aligned`), several
    times faster than rows of an overlapping window."""
    if size not in _SHIFT:
        return None
    return data[:len(data) // size * size].reshape(-1, size)


_SHIFT = {2: 1, 4: 2, 8: 3, 16: 4}


def aligned(rows: np.ndarray, size: int) -> np.ndarray | None:
    """The block index of each byte offset in `rows` (64-bit ints) if every one is a multiple of `size`."""
    shift = _SHIFT.get(size)
    if shift is None or np.count_nonzero(rows & (size - 1)):
        return None
    return (rows >> shift).view(np.int64)


class Memory:
    """Emulated device memory. With ``host_backed`` every allocation is ordinary host
    memory addressed by its real address, so foreign host allocations (a fake HIP
    runtime's hipMalloc) can be registered beside it without address clashes."""

    def __init__(self, host_backed: bool = False) -> None:
        # (sorted bases, their allocations): replaced whole under `_lock`, read without it
        self._index: tuple[list[int], list[Allocation]] = ([], [])
        self._next = _BASE
        self.host_backed = host_backed
        self._external: dict[int, int] = {}     # base -> size of registered foreign memory
        self._lock = threading.RLock()
        # tracer(wave or cohort, addresses, size, active lanes, store[, returns]): called by the
        # global, buffer and atomic (with `returns`) instructions after each access when set
        # (benchmarks.traffic's cache replay and round trips)
        self.tracer: Any = None
        # waiter(wave or cohort, ((counter, n), ...)): called by the vector-memory waits when set
        # (emulator/ops/salu.py vm_wait_counts; benchmarks.traffic's round trips)
        self.waiter: Any = None

    # allocation ---------------------------------------------------------------
    def alloc(self, nbytes: int, label: str = "buffer", align: int = 256) -> int:
        if self.host_backed:
            raw = np.zeros(max(nbytes, 1) + align, np.uint8)
            skip = -raw.ctypes.data % align
            data = raw[skip:skip + max(nbytes, 1)]
            self._insert(Allocation(data.ctypes.data, data, label))
            return data.ctypes.data
        data = np.zeros(max(nbytes, 1), np.uint8)
        with self._lock:
            base = -(-self._next // align) * align
            self._insert(Allocation(base, data, label))
            self._next = base + len(data) + _GAP
        return base

    def register(self, base: int, data: np.ndarray, label: str) -> None:
        """Make existing bytes (a uint8 array) addressable at `base`."""
        self._insert(Allocation(base, data, label))

    def sync_external(self, regions: list[tuple[int, int]]) -> None:
        """Mirror a foreign allocator's live host regions (base, size) as allocations."""
        import ctypes

        live = dict(regions)
        with self._lock:
            for base, size in list(self._external.items()):
                if live.get(base) != size:
                    self.free(base)
                    del self._external[base]
            for base, size in live.items():
                if base not in self._external:
                    view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(base))
                    self._insert(Allocation(base, view, f"host allocation of {size} bytes"))
                    self._external[base] = size

    def _insert(self, a: Allocation) -> None:
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, a.base)
            if (i > 0 and allocs[i - 1].end > a.base) or (i < len(bases) and a.end > bases[i]):
                raise EmulatorFault(f"allocation {a.label} at 0x{a.base:x} overlaps another")
            self._index = ([*bases[:i], a.base, *bases[i:]], [*allocs[:i], a, *allocs[i:]])

    def free(self, base: int) -> None:
        with self._lock:
            bases, allocs = self._index
            i = bisect.bisect_left(bases, base)
            if i == len(bases) or bases[i] != base:
                raise EmulatorFault(f"free of 0x{base:x}, which is not the start of an allocation")
            self._index = (bases[:i] + bases[i + 1:], allocs[:i] + allocs[i + 1:])

    def find(self, addr: int, size: int = 1) -> Allocation | None:
        bases, allocs = self._index
        i = bisect.bisect_right(bases, addr) - 1
        if i >= 0:
            a = allocs[i]
            if addr + size <= a.end:
                return a
        return None

    def nearest(self, addr: int) -> str:
        bases, allocs = self._index
        i = bisect.bisect_right(bases, addr) - 1
        cands = [allocs[j] for j in (i, i + 1) if 0 <= j < len(allocs)]
        if not cands:
            return "no allocations"
        a = min(cands, key=lambda c: min(abs(addr - c.base), abs(addr - c.end)))
        return f"nearest allocation: {a.label} [0x{a.base:x}, 0x{a.end:x}) ({len(a.data)} bytes)"

    # host-side access (copies) ---------------------------------------------------
    def view(self, addr: int, nbytes: int) -> np.ndarray:
        a = self.find(addr, max(nbytes, 1))
        if a is None:
            raise EmulatorFault(f"host copy of {nbytes} bytes at 0x{addr:x} is outside every allocation; "
                                + self.nearest(addr))
        return a.data[addr - a.base: addr - a.base + nbytes]

    # lane access ------------------------------------------------------------------
    def _rows(self, addrs: np.ndarray, size: int, active: np.ndarray, all_active: bool
              ) -> tuple[np.ndarray, np.ndarray] | None:
        """A window of the allocation every active lane's access falls into, and each active lane's row
        in it (one `size`-byte access per row); None when the lanes fall into several allocations
        (`_groups` splits them). Faults name the first bad lane."""
        if addrs.dtype != np.uint64:
            addrs = addrs.astype(np.uint64)
        a = addrs if all_active else addrs[active]
        if len(a):
            alloc = self.find(int(a[0]), size)
            if alloc is not None:
                window, base, last, whole = alloc.window(size)
                rows = a - base                       # addresses below the base wrap to huge rows
                if not np.count_nonzero(rows > last):
                    if whole is not None:
                        at = aligned(rows, size)
                        if at is not None:
                            return whole, at          # row k of `whole` is bytes k*size..
                    return window, rows
        self._check_lanes(addrs, size, active)
        return None

    def _check_lanes(self, addrs: np.ndarray, size: int, active: np.ndarray) -> None:
        for lane in np.flatnonzero(active):
            addr = int(addrs[lane])
            if self.find(addr, size) is None:
                raise EmulatorFault(f"lane {lane} accessed {size} bytes at 0x{addr:x}, outside "
                                    f"every allocation; {self.nearest(addr)}")

    def _groups(self, addrs: np.ndarray, size: int, active: np.ndarray
                ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(lane mask, window, rows) per allocation of an access whose lanes (each inside some
        allocation) fall into several: a gather from two buffers in one instruction, as a GPU allows."""
        addrs = addrs.astype(np.uint64)
        by_alloc: dict[int, tuple[Allocation, list[int]]] = {}
        for lane in np.flatnonzero(active):
            alloc = self.find(int(addrs[lane]), size)
            assert alloc is not None   # _check_lanes ran
            by_alloc.setdefault(alloc.base, (alloc, []))[1].append(int(lane))
        out = []
        for alloc, lanes in by_alloc.values():
            mask = np.zeros(len(addrs), bool)
            mask[lanes] = True
            window, base, _, _ = alloc.window(size)
            out.append((mask, window, addrs[mask] - base))
        return out

    def load(self, addrs: np.ndarray, size: int, active: np.ndarray, all_active: bool = False) -> np.ndarray:
        """(lanes, size) uint8 of the bytes each active lane reads; inactive lanes read 0.
        `all_active` says every lane is active (the caller knows it cheaply)."""
        if not all_active and not np.count_nonzero(active):
            return np.zeros((len(addrs), size), np.uint8)
        found = self._rows(addrs, size, active, all_active)
        out = np.zeros((len(addrs), size), np.uint8)
        if found is None:
            for mask, window, rows in self._groups(addrs, size, active):
                out[mask] = window[rows]
            return out
        window, rows = found
        vals = window.take(rows, axis=0) if window.flags.c_contiguous else window[rows]   # (take: blocks only)
        if all_active:
            return vals
        out[active] = vals
        return out

    def store(self, addrs: np.ndarray, data: np.ndarray, active: np.ndarray, all_active: bool = False) -> None:
        """Write (lanes, size) uint8 for active lanes; later lanes win on overlap, as in hardware order."""
        if not all_active and not np.count_nonzero(active):
            return
        found = self._rows(addrs, data.shape[1], active, all_active)
        if found is None:
            for mask, window, rows in self._groups(addrs, data.shape[1], active):
                window[rows] = data[mask]
            return
        window, rows = found
        window[rows] = data if all_active else data[active]
