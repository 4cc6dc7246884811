"""benchmarks.latency: dependent memory round trips per wave, from the emulator's waits."""

from __future__ import annotations

import numpy as np
import pytest

import hipskinny
from benchmarks import latency, traffic
from hipskinny.arch import ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.emulator.listing import Inst, parse_instruction
from hipskinny.emulator.ops.salu import vm_wait_counts


class _Group:
    id = (0, 0, 0)


class _Wave:
    group, index = _Group(), 0


ON = np.ones(4, bool)


@pytest.mark.parametrize("text, counts", [
    ("s_waitcnt vmcnt(3) lgkmcnt(0)", (("vmcnt", 3),)),
    ("s_waitcnt lgkmcnt(0)", ()),
    ("s_waitcnt_vscnt null, 0x0", (("vscnt", 0),)),
    ("s_wait_loadcnt 0x2", (("loadcnt", 2),)),
    ("s_wait_storecnt 0x0", (("storecnt", 0),)),
    ("s_wait_loadcnt_dscnt 0x301", (("loadcnt", 3),)),     # loadcnt in bits 13:8
    ("s_wait_dscnt 0x0", ()),
])
def test_wait_counters_are_read_from_the_listing(text, counts):
    mnemonic, operands, modifiers = parse_instruction(text)
    inst = Inst(0, 4, text, mnemonic, operands, modifiers)
    assert vm_wait_counts(inst) == counts


def test_a_chain_counts_waits_on_loads_issued_after_the_previous_wait():
    t = latency.RoundTrips(gfx9=False)
    w = _Wave()
    t.issue(0, w, ON, False, False)       # load A (depth 0)
    t.issue(0, w, ON, False, False)       # load B (depth 0): in flight with A
    t.wait(0, w, (("vmcnt", 1),))         # A back: depth 1
    t.issue(0, w, ON, False, False)       # C issued at depth 1
    t.wait(0, w, (("vmcnt", 1),))         # B back: B left at depth 0, so still depth 1
    assert t.chains[0][(0, 0, 0), 0].depth == 1
    t.wait(0, w, (("vmcnt", 0),))         # C back: depth 2
    t.issue(0, w, ON, True, False)        # a store at depth 2, never waited for: the end waits
    t.wait(0, w, (("vmcnt", 0),))         # loads only (gfx10+: stores count in vscnt)
    assert t.of(0) == [3]
    t.issue(0, w, np.zeros(4, bool), False, False)    # no active lane: no access
    assert t.of(0) == [3]


def test_gfx9_counts_loads_and_stores_in_one_counter():
    t = latency.RoundTrips(gfx9=True)
    w = _Wave()
    t.issue(0, w, ON, True, False)        # store (depth 0)
    t.issue(0, w, ON, False, False)       # load (depth 0)
    t.wait(0, w, (("vmcnt", 1),))         # the store has landed, the load need not
    t.wait(0, w, (("vmcnt", 0),))
    assert t.of(0) == [1]
    t.issue(0, w, ON, True, True)         # an atomic that returns: a load on every arch
    t.wait(0, w, (("vmcnt", 0),))
    assert t.of(0) == [2]


def test_floor_is_launch_overhead_plus_unhidden_round_trips():
    trips = latency.Trips(longest=4, total=4000, waves=1000)
    one = latency.floor_seconds("gfx942", [(trips, 400.0, 10_000)])        # slots hide all but the chain
    assert one == pytest.approx((latency.LAUNCH_US["gfx942"] + 4 * 0.4) * 1e-6)
    few = latency.floor_seconds("gfx942", [(trips, 400.0, 100)])           # 40 rounds of 100 waves
    assert few == pytest.approx((latency.LAUNCH_US["gfx942"] + 40 * 0.4) * 1e-6)
    assert latency.round_trip_ns("gfx942", 1, 0, 1) == pytest.approx(sum(ARCHS["gfx942"].load_latency_ns[::2]) / 2)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
@pytest.mark.parametrize("lockstep", [True, False])
def test_emulated_gemv_waits_for_its_weights_then_writes(arch, lockstep):
    """gemv: a wave with a share of K loads its rows' weights and x and waits; the wave that
    writes the reduced rows adds a round trip (the store the launch ends on), the same with and without
    lockstep cohorts, and the emulator unhooked afterwards. Waves without an access have no chain."""
    dev = EmulatedDevice(arch, 4, lockstep=lockstep)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(512).astype(np.float16)
    w = rng.standard_normal((64, 512)).astype(np.float16)
    with hipskinny.on_device(dev), traffic.Recorder(dev, table=False) as rec:
        hipskinny.gemv(x, w)
    assert dev.memory.waiter is None
    trips = rec.round_trips(len(dev.launches) - 1)
    stats = dev.launches[-1]
    assert stats.workgroups <= trips.waves <= stats.waves
    # every wave with an access waits at least once, each workgroup's storing wave once more
    assert 2 <= trips.longest <= 8 and trips.total >= trips.waves + stats.workgroups


@pytest.mark.parametrize("op, arch, n, m, k, cus", [("skinny_gemm", "gfx942", 64, 2048, 4096, 304),
                                                    ("fp8_linear", "gfx950", 16, 2048, 4096, 256),
                                                    ("w4a16_linear", "gfx1100", 32, 1024, 4096, 48)])
def test_splitk_chains_have_no_per_element_round_trips(op, arch, n, m, k, cus, keep_shards):
    """A split-K launch's longest chain, measured on the emulator, within what its structure
    allows: per x pass two waits per staging batch (4 chunks a thread), one per 128-column group
    of W, and per segment of the unit (a row block its run touches) the merge's loads 32 VGPRs at a
    time (hipskinny/splitk.h: (shards - 1) x tiles per thread / (32 / fp32 per tile)), a round trip
    per 8 output rows of the epilogue, 4 more (the ticket, its publish, the last stores). Before,
    staging, merge and epilogue waited per chunk, per tile and shard, per output (Qwen3 o_proj N = 64
    on gfx942: 83 round trips)."""
    from benchmarks import dynamic
    s = dynamic._emulate(op, arch, cus, np.float16, n, m, k, seed=0)
    info, wave = s.info, hipskinny.arch.ARCHS[arch].wave_size
    nt, shards, length = info["token_tiles"], info["shards"], info["unit_len"] // 128
    groups = -(-k // 128)
    # the most row blocks a unit's run touches (splitk.h Walk): one when row blocks are padded to whole units
    segments = 1 if info["block_len"] != 128 * groups else -(-(length - 1) // groups) + 1
    passes = -(-128 * length // (1024 // nt)) + segments - 1
    tiles = (128 // (16 * 256 // wave)) * nt          # 16-row tiles per wave x token tiles
    per_trip = 32 // (256 // wave)                    # fp32 tiles per merge round trip
    per_segment = -(-(shards - 1) * tiles // per_trip) + -(-16 * nt // 8) + 4
    bound = passes * 2 * 2 + length + segments * per_segment
    (w,) = [w for w in s.waits if "splitk" in w.kernel]
    assert shards > 1 and w.trips.longest <= bound, (w.trips, bound, info)
