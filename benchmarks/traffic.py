"""Where an emulated call's global memory traffic goes: bytes per allocation and launch, both as
requested (every active lane's access counted, the emulator's LaunchStats measure) and as distinct
bytes touched (at 4-byte granularity). Requested minus distinct is re-reads: on a GPU those are
mostly cache hits (a quad's lanes loading one scale, every workgroup staging the same x row),
which a byte-counting roofline charges as DRAM traffic.

    with traffic.Recorder(device) as rec:
        op(...)
    rec.table()   # {launch index: {allocation base: Traffic}}
    rec.dram(0, cache.HIERARCHIES["gfx942"], 608)   # launch 0 through MI300X's caches, 608 workgroups at once
    rec.round_trips(0)  # launch 0's dependent round trips per wave (benchmarks/latency.py)

For `dram` the recorder also keeps each workgroup's access stream: one entry per wave and
global instruction, the 128-byte lines it touched (from the emulator's memory tracer, which
says which lanes belong to which workgroup when several run side by side).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from hipskinny.arch import ARCHS

from . import cache, latency

GRAIN = 4   # bytes per tracked word


@dataclass
class Traffic:
    loaded: int = 0       # requested bytes, as LaunchStats counts them
    stored: int = 0
    size: int = 0         # the allocation's size
    words: Any = None     # int32 per 4-byte word: requested bytes (loads and stores) that fell in it

    @property
    def distinct(self) -> int:
        return GRAIN * int(np.count_nonzero(self.words))

    def region(self, start: int, end: int) -> tuple[int, int]:
        """(requested, distinct) bytes of the allocation's byte range [start, end)."""
        w = self.words[start // GRAIN:-(-end // GRAIN)]
        return int(w.sum()), GRAIN * int(np.count_nonzero(w))


class Recorder:
    """Wraps an EmulatedDevice's memory accesses and launches while active (not thread-safe; the
    emulator runs one launch at a time)."""

    def __init__(self, device: Any, *, table: bool = True, shared: tuple[np.ndarray, ...] = ()) -> None:
        """``table=False``: only the workgroup streams (for `dram`), not the per-allocation table.
        ``shared``: host arrays (the activation x) whose device copies are shared lines
        (`benchmarks.cache`)."""
        self.device = device
        self.keep_table = table
        self.shared_sources = shared
        self.shared: set[int] = set()      # lines of the shared sources' device copies
        self.mem = device.memory
        self.launch_index = 0
        self.data: dict[int, dict[int, Traffic]] = defaultdict(dict)
        # launch -> workgroup id -> [(lines, requested bytes, store, place in the emulator's order)], one
        # entry per wave instruction
        self.streams: dict[int, dict[tuple[int, int, int], list]] = defaultdict(lambda: defaultdict(list))
        self.order = 0
        self.trips = latency.RoundTrips(device.arch.generation == 9)

    def _trace(self, w: Any, addrs: np.ndarray, size: int, active: np.ndarray, store: bool,
               returns: bool = False) -> None:
        self.trips.issue(self.launch_index, w, active, store, returns)
        members = getattr(w, "members", None)      # a cohort: member k's lanes are k * n .. k * n + n - 1
        parts = [(w.group.id, addrs, active)] if members is None else \
            [(m.group.id, addrs[k * w.wave_n:(k + 1) * w.wave_n], active[k * w.wave_n:(k + 1) * w.wave_n])
             for k, m in enumerate(members)]
        streams = self.streams[self.launch_index]
        for gid, a, on in parts:
            a = a[on]
            if len(a):
                streams[gid].append((cache.lines_of(a, size), size * len(a), store, self.order))
                self.order += 1

    def _wait(self, w: Any, counts: tuple[tuple[str, int], ...]) -> None:
        self.trips.wait(self.launch_index, w, counts)

    def round_trips(self, launch: int) -> latency.Trips:
        """Launch ``launch``'s dependent round trips per wave (`benchmarks.latency`), summarized."""
        return latency.Trips.of(self.trips.of(launch))

    def costs(self, launch: int, stats: Any, arch: str, cus: int, per_cu: int = cache.PER_CU
              ) -> tuple[cache.CacheResult, latency.Waits]:
        """Launch ``launch`` (its `LaunchStats` ``stats``) on a GPU of the arch with ``cus`` CUs:
        its requests through that GPU's caches (`cache.for_cus`, with room for the shared lines it
        touches, whose DRAM traffic it counts apart) with ``per_cu`` workgroups per CU resident,
        and what it waited on (`latency.Waits`)."""
        streams = self._ordered(launch)
        shared = frozenset(self.shared.intersection(cache.touched_lines(streams))) if self.shared else frozenset()
        hierarchy = cache.for_cus(cache.HIERARCHIES[arch], cus, ARCHS[arch].default_cu_count,
                                  cache.LINE * len(shared))
        caches = cache.replay(hierarchy, streams, min(stats.workgroups, cus * per_cu), shared)
        return caches, latency.Waits.of(stats.kernel, arch, self.round_trips(launch), caches)

    def dram(self, launch: int, hierarchy: cache.Hierarchy, resident: int) -> cache.CacheResult:
        """Launch ``launch``'s accesses through ``hierarchy`` (`benchmarks.cache.replay`), its
        workgroups in dispatch order (x fastest), ``resident`` of them at a time."""
        return cache.replay(hierarchy, self._ordered(launch), resident)

    def _ordered(self, launch: int) -> list[list[tuple[np.ndarray, int, bool, int]]]:
        streams = self.streams.get(launch, {})
        return [streams[g] for g in sorted(streams, key=lambda g: (g[2], g[1], g[0]))]

    def _note(self, addrs: np.ndarray, size: int, active: np.ndarray, all_active: bool, store: bool) -> None:
        a = (addrs if all_active else addrs[active]).astype(np.uint64)
        if not len(a):
            return
        first = self.mem.find(int(a[0]), size)
        bases = None   # every lane in the first lane's allocation (the usual case), else per lane
        if first is None or np.count_nonzero(a - np.uint64(first.base) > np.uint64(len(first.data) - size)):
            bases = np.array([self._base(int(x), size) for x in a], np.int64)
        for base in (np.unique(bases) if bases is not None else [first.base]):
            if base < 0:   # outside every allocation: the real access faults with the full message
                continue
            lanes = a if bases is None else a[bases == base]
            self._add(int(base), lanes, size, store)

    def _base(self, addr: int, size: int) -> int:
        alloc = self.mem.find(addr, size)
        return -1 if alloc is None else alloc.base

    def _add(self, base: int, a: np.ndarray, size: int, store: bool) -> None:
        alloc = self.mem.find(base, 1)
        t = self.data[self.launch_index].get(base)
        if t is None:
            t = self.data[self.launch_index][base] = Traffic(
                size=len(alloc.data), words=np.zeros(-(-len(alloc.data) // GRAIN), np.int32))
        if store:
            t.stored += size * len(a)
        else:
            t.loaded += size * len(a)
        first = (a - np.uint64(base)) // np.uint64(GRAIN)
        span = -(-size // GRAIN)
        idx = np.add.outer(first.astype(np.int64), np.arange(span)).ravel().clip(0, len(t.words) - 1)
        np.add.at(t.words, idx, min(size, GRAIN))

    def __enter__(self) -> Recorder:
        mem, dev = self.mem, self.device
        load, store, dispatch = mem.load, mem.store, dev.dispatch

        def rec_load(addrs, size, active, all_active=False):
            self._note(addrs, size, active, all_active, False)
            return load(addrs, size, active, all_active)

        def rec_store(addrs, data, active, all_active=False):
            self._note(addrs, data.shape[1], active, all_active, True)
            return store(addrs, data, active, all_active)

        def rec_dispatch(*args, **kwargs):
            try:
                return dispatch(*args, **kwargs)
            finally:
                self.launch_index += 1

        copy = dev.copy_to_device

        def rec_copy(dst, src, nbytes, stream=0):
            if isinstance(src, np.ndarray) and any(a.nbytes == nbytes and np.array_equal(_bytes(a), _bytes(src))
                                                   for a in self.shared_sources):
                self.shared.update(range(int(dst) // cache.LINE, -(-(int(dst) + nbytes) // cache.LINE)))
            return copy(dst, src, nbytes, stream)

        if self.keep_table:
            mem.load, mem.store = rec_load, rec_store
        dev.dispatch = rec_dispatch
        if self.shared_sources:
            dev.copy_to_device = rec_copy
        mem.tracer = self._trace
        mem.waiter = self._wait
        return self

    def __exit__(self, *exc: Any) -> None:
        for obj, name in ((self.mem, "load"), (self.mem, "store"), (self.device, "dispatch"),
                          (self.device, "copy_to_device")):
            obj.__dict__.pop(name, None)   # back to the class's methods
        self.mem.tracer = None
        self.mem.waiter = None

    def table(self) -> dict[int, dict[int, Traffic]]:
        return dict(self.data)


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


__all__ = ["GRAIN", "Recorder", "Traffic"]
