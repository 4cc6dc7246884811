"""benchmarks.traffic: per-allocation requested and distinct bytes of emulated launches."""

from __future__ import annotations

import numpy as np

import hipskinny
from benchmarks import traffic
from hipskinny.emulator import EmulatedDevice


def test_recorder_agrees_with_launch_stats_and_sees_each_buffer_once():
    dev = EmulatedDevice("gfx1201")
    rng = np.random.default_rng(0)
    m, k = 64, 256
    x = rng.standard_normal(k).astype(np.float16)
    w = rng.standard_normal((m, k)).astype(np.float16)
    with hipskinny.on_device(dev), traffic.Recorder(dev) as rec:
        hipskinny.gemv(x, w)
    assert "load" not in dev.memory.__dict__ and "launch" not in dev.__dict__   # unwrapped
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
