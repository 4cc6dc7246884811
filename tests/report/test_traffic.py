"""benchmarks.traffic: per-allocation requested and distinct bytes of emulated launches."""

from __future__ import annotations

import numpy as np
import pytest

import hipskinny
from benchmarks import cache, traffic
from benchmarks.cache import LINE
from hipskinny.emulator import EmulatedDevice


def test_recorder_agrees_with_launch_stats_and_sees_each_buffer_once():
    dev = EmulatedDevice("gfx1201")
    rng = np.random.default_rng(0)
    m, k = 64, 256
    x = rng.standard_normal(k).astype(np.float16)
    w = rng.standard_normal((m, k)).astype(np.float16)
    with hipskinny.on_device(dev), traffic.Recorder(dev) as rec:
        hipskinny.gemv(x, w)
    assert "load" not in dev.memory.__dict__ and "dispatch" not in dev.__dict__   # unwrapped
    table = rec.table()
    assert list(table) == [0]   # one launch
    stats = dev.launches[-1]
    per = table[0].values()
    assert sum(t.loaded for t in per) == stats.bytes_loaded["global"]
    assert sum(t.stored for t in per) == stats.bytes_stored["global"]
    # the weights, x and y are touched exactly: every byte of w and x, each y element once
    distinct = sorted(t.distinct for t in per)
    assert w.nbytes in distinct and x.nbytes in distinct and 2 * m in distinct
    for t in per:
        req, dist = t.region(0, t.size)
        assert req == t.loaded + t.stored and dist == t.distinct and dist <= req


def test_region_splits_one_allocation():
    t = traffic.Traffic(size=32, words=np.array([4, 0, 8, 2, 0, 0, 4, 4], np.int32))
    assert t.region(0, 16) == (14, 12)
    assert t.region(16, 32) == (8, 8)
    assert t.distinct == 20


@pytest.mark.parametrize("lockstep", [True, False])
def test_dram_reads_each_byte_once_where_requests_repeat_it(lockstep):
    """skinny_gemm stages x in every workgroup: the requests repeat x once per workgroup, the
    cache model reads it (and the weights) from DRAM once and writes y once; the workgroup streams
    hold every requested byte, attributed to the workgroups the launch had (also when the emulator
    runs several side by side)."""
    dev = EmulatedDevice("gfx942", 8, lockstep=lockstep)
    rng = np.random.default_rng(1)
    n, m, k = 4, 512, 1024
    x = rng.standard_normal((n, k)).astype(np.float16)
    w = rng.standard_normal((m, k)).astype(np.float16)
    with hipskinny.on_device(dev), traffic.Recorder(dev) as rec:
        hipskinny.skinny_gemm(x, w)
    assert dev.memory.tracer is None                          # unhooked
    launch = len(dev.launches) - 1                             # the kernel (host copies are no launches)
    stats, per = dev.launches[launch], rec.table()[launch].values()
    streams = rec.streams[launch]
    assert len(streams) == stats.workgroups > 1
    assert sum(r for s in streams.values() for _, r, *_ in s) == sum(t.loaded + t.stored for t in per)
    x_requests = max(t.loaded for t in per if t.size == x.nbytes)
    assert x_requests >= stats.workgroups * x.nbytes           # staged by every workgroup
    r = rec.dram(launch, cache.HIERARCHIES["gfx942"], 8 * 2)
    assert r.dram_read == w.nbytes + x.nbytes                  # whole 128-byte lines: both are multiples
    assert r.dram_write == n * m * 2
    assert r.requested > r.dram_bytes
    # Caches of ~27 KB, one workgroup at a time: each one's 64 KB of weights pushes x out before
    # the next one stages it again.
    small = rec.dram(launch, cache.Hierarchy(LINE * 3, 8, LINE * 209), 1)
    assert r.dram_read < small.dram_read <= w.nbytes + stats.workgroups * x.nbytes
