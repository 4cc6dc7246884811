"""benchmarks/cache.py: the LRU last-level model that turns requested bytes into DRAM bytes."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cache import HIERARCHIES, LINE, Hierarchy, MiB, for_cus, lines_of, replay, touched_lines


def _reads(start: int, nbytes: int, per_access: int = 1024) -> list:
    """A workgroup's stream reading [start, start + nbytes) in wave accesses of ``per_access`` bytes."""
    return [(lines_of(np.arange(a, a + per_access, 16), 16), per_access, False)
            for a in range(start, start + nbytes, per_access)]


def test_hierarchies_are_the_flagships_of_archs_md():
    mib = {a: (h.l2_bytes // MiB, h.l2_count, h.mall_bytes // MiB) for a, h in HIERARCHIES.items()}
    assert mib == {"gfx942": (4, 8, 256), "gfx950": (4, 8, 256), "gfx1100": (6, 1, 96),
                   "gfx1151": (2, 1, 32), "gfx1201": (8, 1, 64)}


def test_a_smaller_product_keeps_the_cache_per_cu():
    mi300x = HIERARCHIES["gfx942"]                              # 304 CUs, 8 XCDs of 38
    assert for_cus(mi300x, 304, 304) == mi300x
    assert for_cus(mi300x, 152, 304) == Hierarchy(4 * MiB, 4, 128 * MiB)
    small = for_cus(mi300x, 19, 304)                            # half an XCD
    assert (small.l2_count, small.l2_bytes, small.mall_bytes) == (1, 2 * MiB, 16 * MiB)
    assert for_cus(HIERARCHIES["gfx1151"], 10, 40) == Hierarchy(MiB // 2, 1, 8 * MiB)


def test_a_smaller_product_keeps_room_for_the_shared_lines():
    h = HIERARCHIES["gfx1151"]                                  # 2 MiB L2, 32 MiB MALL, 40 CUs
    assert for_cus(h, 40, 40, shared=MiB) == h
    one = for_cus(h, 1, 40, shared=MiB // 2)                    # x of 512 KiB: held once on the whole chip
    assert one.l2_bytes == int(2 * MiB / 40 + MiB // 2 * 39 / 40)
    assert one.mall_bytes == int(32 * MiB / 40 + MiB // 2 * 39 / 40)
    assert for_cus(h, 1, 40, shared=64 * MiB).mall_bytes == 32 * MiB       # never more than the chip's


def test_shared_lines_traffic_is_counted_apart():
    h = Hierarchy(l2_bytes=2 * LINE, l2_count=1, mall_bytes=4 * LINE)
    x = _reads(0, 2 * LINE, LINE)                               # lines 0, 1: shared
    streams = [x + _reads((8 + 4 * wg) * LINE, 4 * LINE, LINE) for wg in range(2)]
    streams.append([(lines_of(np.array([LINE]), 4), 4, True)])  # a store dirties line 1
    r = replay(h, streams, resident=1, shared=frozenset({0, 1}))
    assert r.dram_read == 4 * LINE + 8 * LINE                   # x twice (evicted by 4 weight lines), weights once
    assert r.shared_bytes == 4 * LINE + LINE                    # x's two reads, and line 1 written back
    assert r.dram_write == LINE
    assert touched_lines(streams) == [0, 1, *range(8, 16)]


def test_lines_of():
    assert lines_of(np.array([0, 16, 112]), 16).tolist() == [0]
    assert lines_of(np.array([120]), 16).tolist() == [0, 1]          # straddles a line boundary
    assert lines_of(np.array([256, 0, 128]), 4).tolist() == [0, 1, 2]


def test_streamed_weights_all_come_from_dram():
    streams = [_reads(wg * 8192, 8192) for wg in range(64)]
    r = replay(HIERARCHIES["gfx942"], streams, resident=16)
    assert r.dram_read == r.requested == 64 * 8192 and r.dram_write == 0
    assert r.l2_hits == r.mall_hits == 0


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_a_row_every_workgroup_stages_is_read_from_dram_once(arch):
    row = 1 << 30                                             # x: 4 KiB every workgroup reads
    streams = [_reads(row, 4096) + _reads(wg * 8192, 8192) for wg in range(64)]
    h = HIERARCHIES[arch]
    r = replay(h, streams, resident=16)
    assert r.requested == 64 * (4096 + 8192)
    assert r.dram_read == 4096 + 64 * 8192
    # Each L2 misses the row once (then the MALL has it); every other read of it hits its L2.
    assert r.mall_hits == (h.l2_count - 1) * 4096 // LINE
    assert r.l2_hits == (64 - h.l2_count) * 4096 // LINE


def test_a_working_set_beyond_the_last_level_thrashes():
    h = Hierarchy(l2_bytes=4 * LINE, l2_count=1, mall_bytes=8 * LINE)
    twice = [_reads(0, 16 * LINE, LINE) * 2]                   # 16 lines, read in order twice
    assert replay(h, twice, resident=1).dram_read == 32 * LINE   # LRU on a cyclic scan: no hit
    fits = [_reads(0, 8 * LINE, LINE) * 2]
    assert replay(h, fits, resident=1).dram_read == 8 * LINE


def test_concurrent_workgroups_share_what_sequential_ones_evict():
    h = Hierarchy(l2_bytes=LINE, l2_count=1, mall_bytes=2 * LINE)
    streams = [_reads(0, 4 * LINE, LINE) for _ in range(2)]    # both read lines 0..3
    assert replay(h, streams, resident=1).dram_read == 8 * LINE
    assert replay(h, streams, resident=2).dram_read == 4 * LINE


def test_writes_cost_one_write_back_per_line_and_no_fetch():
    streams = [[(lines_of(np.arange(wg * 1024, wg * 1024 + 1024, 4), 4), 1024, True)] for wg in range(8)]
    r = replay(HIERARCHIES["gfx1151"], streams, resident=4)
    assert r.dram_read == 0 and r.dram_write == 8 * 1024


def test_a_load_after_a_store_in_the_emulators_order_reads_no_dram():
    """Causality: the replay interleaves workgroups, which can reach a load before the store it
    followed on the emulator (a split-K finisher reading another shard's partials); that load is
    served by the caches, the store still costs its one write-back. A load that came first on the
    emulator still misses."""
    h = HIERARCHIES["gfx942"]
    tile = lines_of(np.arange(0, 4 * LINE, 4), 4)
    # place in the emulator's order: workgroup 0 reads its weights (0), writes the tile (1);
    # workgroup 1, run after it, reads the tile (2) as its first access -- before the store in the replay
    writer = [(lines_of(np.arange(1 << 20, (1 << 20) + LINE, 4), 4), LINE, False, 0), (tile, 4 * LINE, True, 1)]
    reader = [(tile, 4 * LINE, False, 2)]
    r = replay(h, [writer, reader], resident=2)
    assert r.dram_read == LINE and r.dram_write == 4 * LINE
    early = [(tile, 4 * LINE, False, -1)]                     # read before anyone wrote it
    r = replay(h, [writer, early], resident=2)
    assert r.dram_read == 5 * LINE and r.dram_write == 4 * LINE
    r = replay(h, [[a[:3] for a in writer], [a[:3] for a in reader]], resident=2)   # no order: as replayed
    assert r.dram_read == 5 * LINE


def test_a_smaller_product_holds_less():
    h = HIERARCHIES["gfx1151"]                                  # 32 MiB MALL
    stream = [_reads(0, 4 * MiB, 64 * 1024) * 2]
    assert replay(h, stream, resident=1).dram_read == 4 * MiB                          # fits
    assert replay(for_cus(h, 2, 40), stream, resident=1).dram_read == 8 * MiB       # 1.6 MiB MALL: thrashes
