"""The latency floor: what the roofline leaves out when a launch is too small or too dependent to
keep the memory system busy.

The roofs (model.py) assume that enough waves are in flight to hide every access's latency. A
decode launch with a small grid, or a wave that must wait for one load before it can issue the
next (a gather through an index list, a scale read before the weights it scales), can take far
longer than its bytes / bandwidth. This floor counts what the emulator saw such a wave wait for:

- **Dependent round trips per wave.** Every global load or store a wave issues is stamped with
  the number of round trips the wave had already waited for (its depth); a vector-memory wait
  (``s_waitcnt vmcnt``, ``vscnt``, gfx12's ``s_wait_loadcnt`` / ``storecnt``) that retires an
  access raises the wave's depth to that access's stamp + 1, with the counters' in-order
  semantics (gfx9: loads and stores share vmcnt; gfx10+: loads and stores count apart). A
  load issued before the previous wait returned (software pipelining) therefore adds nothing
  to the chain, and the stores outstanding at the end add one (the launch ends when they land).
  A wave's chain is its depth at the end. Scalar (SMEM) loads are not counted: the kernel
  argument fetch is part of the launch overhead, and the few uniform scales read with s_load
  are left out (the floor only gets lower).
- **Latency per round trip**: the arch's load latency at each level (`ArchInfo.load_latency_ns`,
  sourced in `benchmarks.hardware.HARDWARE`; the low end of a published range),
  weighted by where the launch's loaded lines were served in the cache model
  (benchmarks/cache.py: L2 hit, MALL hit, DRAM).
- **Overlap.** A SIMD switches between its resident waves, so at most ``SIMDs x occupancy``
  chains progress at once: the launch takes at least the longest chain, and at least the sum of
  all chains over that many slots (which is also the tail of a grid that does not fill the GPU:
  its longest chain is the bound).
- **Launch overhead** (`LAUNCH_US`, sourced in `SOURCES`) per launch of the call: the published
  per-dispatch time of a trivial kernel replayed from a HIP graph (what a serving engine's
  decode step pays). It includes that kernel's own round trip, so the floor can overstate by
  one (< 0.5 µs) per launch.

    floor = sum over launches of  LAUNCH_US + latency x max(longest chain, sum of chains / slots)
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from typing import Any

from hipskinny import registry
from hipskinny.arch import ARCHS

from .cache import LINE

# Per-dispatch time of a trivial kernel (one atomic), replayed from a HIP graph, µs.
LAUNCH_US: dict[str, float] = {"gfx942": 2.0, "gfx950": 2.0, "gfx1100": 2.82, "gfx1151": 1.75, "gfx1201": 2.15}
# Where the launch times come from (the latencies: `hardware.HARDWARE`'s sources).
SOURCES = {
    "gfx942": "assumed 2.0 µs like the RDNA parts' graph-replay figures (none published for CDNA)",
    "gfx950": "assumed equal to gfx942",
    "gfx1100": "2.82 µs per dispatch in a HIP graph replay: ROCm/ROCm#6409",
    "gfx1151": "1.75 µs (ROCm/ROCm#6409, graph replay)",
    "gfx1201": "2.15 µs (ROCm/ROCm#6409, Radeon AI PRO R9700, graph replay)",
}


class _Chain:
    """One wave's outstanding vector-memory accesses (their depths at issue) and its depth."""

    __slots__ = ("depth", "loads", "stores")

    def __init__(self) -> None:
        self.depth = 0
        self.loads: deque[int] = deque()      # gfx9: loads and stores (one vmcnt)
        self.stores: deque[int] = deque()

    def retire(self, queue: deque[int], left: int) -> None:
        depth = self.depth
        while len(queue) > left:
            stamp = queue.popleft() + 1
            if stamp > depth:
                depth = stamp
        self.depth = depth

    def final(self) -> int:
        tails = [q[-1] + 1 for q in (self.loads, self.stores) if q]   # stamps never decrease
        return max([self.depth, *tails])


class RoundTrips:
    """Per-wave dependent round trips of the launches of one call (see the module docstring).
    ``issue`` and ``wait`` take a wave or a lockstep cohort (whose members' lanes are side by
    side, ``wave_n`` each)."""

    def __init__(self, gfx9: bool) -> None:
        self.gfx9 = gfx9
        self.chains: dict[int, dict[tuple[Any, int], _Chain]] = {}

    @staticmethod
    def _waves(w: Any) -> list[Any]:
        members = getattr(w, "members", None)
        return [w] if members is None else members

    def _chain(self, launch: int, wave: Any) -> _Chain:
        chains = self.chains.setdefault(launch, {})
        key = (wave.group.id, wave.index)
        found = chains.get(key)
        if found is None:
            found = chains[key] = _Chain()
        return found

    def issue(self, launch: int, w: Any, active: Any, store: bool, returns: bool) -> None:
        """A vector-memory instruction: an access for every member with an active lane (an atomic
        that returns its old value counts as a load)."""
        waves = self._waves(w)
        n = getattr(w, "wave_n", None)
        for k, wave in enumerate(waves):
            if not (active.any() if n is None else active[k * n:(k + 1) * n].any()):
                continue
            chain = self._chain(launch, wave)
            as_store = store and not returns and not self.gfx9
            (chain.stores if as_store else chain.loads).append(chain.depth)

    def wait(self, launch: int, w: Any, counts: tuple[tuple[str, int], ...]) -> None:
        for wave in self._waves(w):
            chain = self._chain(launch, wave)
            for counter, left in counts:
                stores = counter in ("vscnt", "storecnt")
                chain.retire(chain.stores if stores else chain.loads, left)

    def of(self, launch: int) -> list[int]:
        """Each wave's chain (its dependent round trips) in launch ``launch``."""
        return [c.final() for c in self.chains.get(launch, {}).values()]


@dataclass(frozen=True)
class Trips:
    """A launch's chains, summarized: the longest, their sum and how many waves had any."""
    longest: float = 0.0
    total: float = 0.0
    waves: float = 0.0

    @staticmethod
    def of(chains: list[int]) -> Trips:
        return Trips(float(max(chains, default=0)), float(sum(chains)), float(len(chains)))

    def scaled(self, factor: float) -> Trips:
        """The real launch's from a scaled-down sample's (same work per wave, ``factor`` x the waves)."""
        return Trips(self.longest, self.total * factor, self.waves * factor)


@dataclass(frozen=True)
class Waits:
    """What one launch waited on: its waves' dependent round trips and the latency of one, from
    where the cache model served its loaded lines."""
    kernel: str
    trips: Trips
    round_trip_ns: float

    @staticmethod
    def of(kernel: str, arch: str, trips: Trips, caches: Any) -> Waits:
        """From the launch's `Trips` and its `cache.CacheResult`."""
        return Waits(kernel, trips, round_trip_ns(arch, caches.l2_hits, caches.mall_hits, caches.dram_read / LINE))


def round_trip_ns(arch: str, l2_hits: float, mall_hits: float, dram_lines: float) -> float:
    """Latency of one round trip: the levels' latencies weighted by where the launch's loaded
    lines were served (DRAM's alone when it loaded nothing)."""
    l2, mall, dram = ARCHS[arch].load_latency_ns
    total = l2_hits + mall_hits + dram_lines
    if total <= 0:
        return dram
    return (l2 * l2_hits + mall * mall_hits + dram * dram_lines) / total


@functools.cache
def manifest_occupancy(arch: str, kernel: str) -> int:
    """A shipped kernel's waves per SIMD from the manifest (registers and static LDS; without the
    launch's dynamic LDS, so at least the true figure: the lower floor); the arch's cap if unknown."""
    for entry in registry.manifest()["code_objects"].values():
        if entry["arch"] == arch:
            for k in entry["kernels"]:
                if k["name"] == kernel and k.get("occupancy"):
                    return int(k["occupancy"])
    return ARCHS[arch].max_waves_per_simd


def call_floor(arch: str, waits: list[Waits], scale: float = 1.0, occupancy: dict[str, int] | None = None) -> float:
    """The latency floor of a call at its real shape from its launches' `Waits` (a scaled-down
    sample's chains scaled by ``scale``), the chains overlapped over SIMDs x the kernel's
    occupancy (``occupancy`` where given, else `manifest_occupancy`)."""
    info = ARCHS[arch]
    simds = info.default_cu_count * info.simds_per_cu
    occ = occupancy or {}
    return floor_seconds(arch, [(w.trips.scaled(scale), w.round_trip_ns,
                                 simds * occ.get(w.kernel, manifest_occupancy(arch, w.kernel))) for w in waits])


def floor_seconds(arch: str, launches: list[tuple[Trips, float, int]]) -> float:
    """The latency floor of a call on ``arch``: per launch (its chains, as scaled to the real
    shape; the latency of one round trip in ns; the wave slots, SIMDs x resident waves per SIMD)."""
    total = 0.0
    for trips, ns, slots in launches:
        rounds = max(trips.longest, trips.total / max(1, slots))
        total += LAUNCH_US[arch] * 1e-6 + rounds * ns * 1e-9
    return total


__all__ = ["LAUNCH_US", "SOURCES", "RoundTrips", "Trips", "Waits", "call_floor", "floor_seconds",
           "manifest_occupancy", "round_trip_ns"]
