"""A last-level cache model for the report: which of a launch's requested bytes reach DRAM.

The byte-counting roofline charges every requested byte at DRAM price, so an activation row that
600 workgroups stage counts 600 times although the GPU serves all but the first from its caches.
This model replays a launch's global accesses through least-recently-used caches of the arch's
sizes and counts only what misses the last level (``dram_bytes``):

- **Lines.** Accesses are charged by 128-byte line (the CDNA3 L2 line; taken for every level and
  arch, an assumption: RDNA's L2 line is 128 bytes too, its Infinity Cache's 64).
- **Levels** (``../shared/reference/archs.md`` section 3): an L2 per XCD on CDNA (MI300X / MI355X:
  8 x 4 MiB; a workgroup uses the L2 of the XCD it is dispatched to, round robin over XCDs) or one
  per chip on RDNA, then the chip's MALL / Infinity Cache (256, 256, 96, 32, 64 MiB). Inclusive:
  a line is filled into both on a miss; the L2 is not flushed within a launch.
- **Cold per call.** Every call starts with empty caches, so weights streamed once by design are
  never credited as cached by a previous launch (or a previous benchmark repetition).
- **Concurrency.** The emulator runs workgroups one after another; on a GPU ``resident`` of them
  (CUs x workgroups per CU) run at once and their accesses interleave. `replay` deals the
  workgroups into that many slots in launch order (a slot takes the next workgroup when its own
  ends) and advances the slots one access each in turn.
- **Writes** allocate lines and mark them dirty; a dirty line costs one DRAM write when it leaves
  the last level or when the launch ends.
- **Causality.** The interleaving above is not the order in which the launch's workgroups saw each
  other's data: a split-K unit's finishing workgroup reads the other shards' partials only after
  they were written (its counter says so), yet the replay may reach that read before their stores.
  Each access carries its place in the emulator's order (which is causal), and a load that misses
  every level on a line some store wrote earlier in that order is served by the MALL, where the
  store left it (the store, replayed later, still dirties it: one DRAM write).
- **Shared lines and the scaled-down GPU.** The report emulates a sample on a GPU of fewer CUs
  with proportionally fewer weight rows (benchmarks/dynamic.py) and scales its counts up by the
  rows. The activation x (the report's host array, wherever the op copies it; with its x_scale)
  does not shrink with the sample: its lines are *shared*, and the scaling is
  wrong for them twice over. Room: a level of the flagship holds them once next to all its CUs'
  own streams, so the sample's levels keep room for them on top of their share of the rest
  (`for_cus`). Misses: the sample has as many rounds of work units per resident workgroup as the
  flagship (its plan scales grid and units alike) and every round reads them alike, so the
  flagship moves them between DRAM and the caches as often as the sample does, not M / M' times
  as often; `replay` counts that traffic apart (``shared_bytes``) so the report leaves it unscaled.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

LINE = 128
MiB = 1 << 20
PER_CU = 2      # workgroups resident per CU when a launch's plan does not say (an assumption)


@dataclass(frozen=True)
class Hierarchy:
    l2_bytes: int          # one L2's capacity
    l2_count: int          # L2s (XCDs on CDNA; 1 on RDNA)
    mall_bytes: int        # the chip's last level (MALL / Infinity Cache)


# archs.md section 3 (S1, S12, P7): the flagship product of each shipped arch.
HIERARCHIES = {
    "gfx942": Hierarchy(4 * MiB, 8, 256 * MiB),     # MI300X
    "gfx950": Hierarchy(4 * MiB, 8, 256 * MiB),     # MI355X
    "gfx1100": Hierarchy(6 * MiB, 1, 96 * MiB),     # RX 7900 XTX
    "gfx1151": Hierarchy(2 * MiB, 1, 32 * MiB),     # Radeon 8060S
    "gfx1201": Hierarchy(8 * MiB, 1, 64 * MiB),     # RX 9070 XT
}


def for_cus(h: Hierarchy, cus: int, full_cus: int, shared: int = 0) -> Hierarchy:
    """The caches of a smaller product of the arch with ``cus`` of the flagship's ``full_cus`` CUs
    (the report's scaled-down GPU): the same cache per CU, as many L2s as the CUs fill XCDs, and
    in each level room for ``shared`` bytes (the shared lines a launch touches) on top: a level of size
    S and CU share f holds ``S * f + min(shared, S) * (1 - f)``."""
    per_l2 = full_cus / h.l2_count
    count = max(1, min(h.l2_count, round(cus / per_l2)))

    def level(size: int, f: float) -> int:
        return int(size * f + min(shared, size) * (1 - f))

    return Hierarchy(level(h.l2_bytes, min(1.0, cus / count / per_l2)), count,
                     level(h.mall_bytes, min(1.0, cus / full_cus)))


class _Lru:
    """An LRU set of lines with dirty bits."""

    def __init__(self, lines: int) -> None:
        self.capacity = max(1, lines)
        self.lines: OrderedDict[int, bool] = OrderedDict()

    def touch(self, line: int, dirty: bool) -> bool:
        """True on a hit (the line becomes most recent; ``dirty`` marks it)."""
        was = self.lines.get(line)
        if was is None:
            return False
        self.lines.move_to_end(line)
        if dirty and not was:
            self.lines[line] = True
        return True

    def fill(self, line: int, dirty: bool) -> tuple[int, bool] | None:
        """Insert a missing line; returns the evicted (line, dirty) if one had to go."""
        self.lines[line] = dirty
        if len(self.lines) > self.capacity:
            return self.lines.popitem(last=False)
        return None


@dataclass
class CacheResult:
    dram_read: int = 0             # bytes read from DRAM (line fills that missed every level)
    dram_write: int = 0            # bytes written back (dirty lines leaving the last level, or at the end)
    shared_bytes: int = 0          # the part of dram_bytes that moved shared lines (see the module docstring)
    requested: int = 0             # bytes the accesses asked for
    l2_hits: int = 0               # line accesses served by an L2
    mall_hits: int = 0             # line accesses served by the MALL
    line_accesses: int = 0

    @property
    def dram_bytes(self) -> int:
        return self.dram_read + self.dram_write


class Model:
    """The caches of one launch (cold at construction)."""

    def __init__(self, h: Hierarchy, shared: frozenset[int] = frozenset(),
                 first_store: dict[int, int] | None = None) -> None:
        """``shared``: the lines whose DRAM traffic is also counted in ``shared_bytes``;
        ``first_store``: per line, the place in the emulator's order of the first store to it."""
        self.l2 = [_Lru(h.l2_bytes // LINE) for _ in range(h.l2_count)]
        self.mall = _Lru(h.mall_bytes // LINE)
        self.shared = shared
        self.first_store = first_store or {}
        self.result = CacheResult()

    def access(self, workgroup: int, lines: np.ndarray, requested: int, store: bool, order: int | None = None) -> None:
        """One wave instruction's access by ``workgroup``: the distinct ``lines`` it touches (line
        indices, i.e. address // LINE) and the bytes it requested; ``order``: its place in the
        emulator's order (see Causality). A store fetches nothing (the caches keep byte masks) and
        dirties the line in the last level."""
        r = self.result
        r.requested += requested
        l2 = self.l2[workgroup % len(self.l2)]
        for line in lines.tolist():
            r.line_accesses += 1
            if store:
                if not l2.touch(line, False):
                    l2.fill(line, False)
                if not self.mall.touch(line, True):
                    self._fill_mall(line, True)
                continue
            if l2.touch(line, False):
                r.l2_hits += 1
                continue
            if self.mall.touch(line, False):
                r.mall_hits += 1
            elif order is not None and self.first_store.get(line, order) < order:
                r.mall_hits += 1         # written before this load: where the store left it
                self._fill_mall(line, False)
            else:
                r.dram_read += LINE
                if line in self.shared:
                    r.shared_bytes += LINE
                self._fill_mall(line, False)
            l2.fill(line, False)         # the L2 holds clean copies: its evictions cost nothing

    def _fill_mall(self, line: int, dirty: bool) -> None:
        out = self.mall.fill(line, dirty)
        if out is not None and out[1]:
            self._write_back(out[0])

    def _write_back(self, line: int) -> None:
        self.result.dram_write += LINE
        if line in self.shared:
            self.result.shared_bytes += LINE

    def finish(self) -> CacheResult:
        """Write back what is still dirty (the launch's outputs) and return the counts."""
        for line, dirty in self.mall.lines.items():
            if dirty:
                self._write_back(line)
        return self.result


def lines_of(addresses: np.ndarray, size: int) -> np.ndarray:
    """The distinct lines that accesses of ``size`` bytes at ``addresses`` touch, in address order."""
    a = np.asarray(addresses, np.uint64)
    first, last = a // np.uint64(LINE), (a + np.uint64(size - 1)) // np.uint64(LINE)
    if np.array_equal(first, last):
        return np.unique(first)
    return np.unique(np.concatenate([first, last]))


def touched_lines(streams: list[list[tuple]]) -> list[int]:
    """The distinct lines that ``streams`` (as `replay` takes them) load or store."""
    every = [lines for stream in streams for lines, *_ in stream]
    return np.unique(np.concatenate(every)).tolist() if every else []


def replay(h: Hierarchy, streams: list[list[tuple]], resident: int,
           shared: frozenset[int] = frozenset()) -> CacheResult:
    """Run ``streams`` (one per workgroup in launch order: (line indices, requested bytes, store[,
    place in the emulator's order]) per wave instruction) through a cold hierarchy with ``resident``
    workgroups at once (see the module docstring); the DRAM traffic of the ``shared`` lines is also
    counted in ``shared_bytes``."""
    first_store: dict[int, int] = {}
    for stream in streams:
        for access in stream:
            if access[2] and len(access) > 3:
                for line in access[0].tolist():
                    first_store[line] = min(first_store.get(line, access[3]), access[3])
    model = Model(h, shared, first_store)
    slots: list[tuple[int, int]] = []            # (workgroup, next access)
    pending = iter(range(len(streams)))
    for _ in range(max(1, resident)):
        wg = next(pending, None)
        if wg is None:
            break
        slots.append((wg, 0))
    while slots:
        kept = []
        for wg, i in slots:
            stream = streams[wg]
            while i >= len(stream):                  # this slot's workgroup is done: the next one
                nxt = next(pending, None)
                if nxt is None:
                    break
                wg, i, stream = nxt, 0, streams[nxt]
            if i >= len(stream):
                continue
            model.access(wg, *stream[i])
            kept.append((wg, i + 1))
        slots = kept
    return model.finish()


__all__ = ["HIERARCHIES", "LINE", "PER_CU", "CacheResult", "Hierarchy", "Model", "for_cus", "lines_of", "replay",
           "touched_lines"]
