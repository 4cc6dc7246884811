"""Lockstep execution (issue 24): the waves of a workgroup executing together give bitwise the
results, and exactly the statistics, of the same launches run one wave at a time.

A sample of every kernel family's launches on every shipped arch, each run twice on fresh
emulated devices: once as shipped (lockstep) and once with ``lockstep=False``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import test_fused_moe as moe_tests
import test_sparse_mla as mla_tests

import hipskinny
from hipskinny import bnb, fp8
from hipskinny.emulator import EmulatedDevice, dispatch
from hipskinny.emulator.dispatch import _run_cohort

ARCHS = ("gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _skinny(arch, n, dt):
    rng = np.random.default_rng(n)
    x, w = rng.standard_normal((n, 512)).astype(dt), rng.standard_normal((96, 512)).astype(dt)
    return lambda: hipskinny.skinny_gemm(x, w)


def _fp8(arch, n):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((n, 512)).astype(np.float16), rng.standard_normal((96, 512)).astype(np.float32)
    q = fp8.quantize(w, granularity="channel", flavor="fnuz" if arch == "gfx942" else "ocp")
    return lambda: hipskinny.fp8_linear(x, *q)


def _4bit(arch, n):
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((n, 512)).astype(BF16), rng.standard_normal((96, 512)).astype(np.float16)
    packed, state = bnb.quantize_4bit(w, quant_type="nf4", blocksize=64, compress_statistics=True)
    return lambda: hipskinny.matmul_4bit(x, packed, state)


def _moe(arch):
    e, k, h, i, n = 8, 2, 128, 64, 3           # the smallest experts: the same kernels and grids
    _, p13, _ = moe_tests._stack(e, 2 * i, h, 64, "gptq", False, False, BF16, seed=8)
    _, w2 = moe_tests._experts16(e, h, i, BF16, seed=8)
    x = np.random.default_rng(9).standard_normal((n, h)).astype(BF16)
    tw, ids = moe_tests._routing(n, k, e, seed=10)
    return lambda: hipskinny.moe.fused_moe(x, p13, w2, tw, ids)


def _mla(arch):
    q, c0, i0, p0, kw = mla_tests._case(np.random.default_rng(1), "v4", 2, 20, [1, 40], [3, 0], bs0=61, sink=True)
    return lambda: mla_tests.op.sparse_mla(q, c0, i0, p0, **kw, scale=512**-0.5, return_lse=True)


CASES = {
    "skinny_gemm-n1": lambda a: _skinny(a, 1, np.float16),
    "skinny_gemm-n16-splitk": lambda a: _skinny(a, 16, BF16),
    "fp8_linear-n4": lambda a: _fp8(a, 4),
    "matmul_4bit-n1": lambda a: _4bit(a, 1),
    "matmul_4bit-n24": lambda a: _4bit(a, 24),
    "fused_moe": _moe,
    "sparse_mla": _mla,
}


def _bits(out) -> list[bytes]:
    outs = out if isinstance(out, tuple) else (out,)
    return [np.ascontiguousarray(np.asarray(o)).tobytes() for o in outs]


def _stats(dev: EmulatedDevice) -> list[tuple]:
    return [(s.kernel, s.instructions, s.mnemonics, s.bytes_loaded, s.bytes_stored, s.workgroups, s.waves,
             s.barriers) for s in dev.launches]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("arch", ARCHS)
def test_lockstep_matches_wave_by_wave(arch, case):
    call = CASES[case](arch)
    results = {}
    for lockstep in (True, False):
        dev = EmulatedDevice(arch, 2, lockstep=lockstep)
        with hipskinny.on_device(dev):
            out = call()
        results[lockstep] = (_bits(out), _stats(dev))
    assert results[True][0] == results[False][0]
    assert results[True][1] == results[False][1]
    assert results[True][1], "no launch recorded"


def test_cohorts_are_used(monkeypatch):
    """The comparison above is not vacuous: the waves of all 4-wave workgroups of a small
    skinny_gemm launch run as one cohort (workgroups side by side, up to `LOCKSTEP_LANES` lanes)."""
    sizes = []

    def spy(program, handlers, lock, cohort, *args):
        sizes.append(len(cohort.members))
        return _run_cohort(program, handlers, lock, cohort, *args)

    monkeypatch.setattr(dispatch, "_run_cohort", spy)
    dev = EmulatedDevice("gfx942", 2)
    with hipskinny.on_device(dev):
        _skinny("gfx942", 1, np.float16)()
    waves = dev.last_launch_stats.waves
    assert waves > 4 and waves * 64 <= dispatch.LOCKSTEP_LANES
    assert max(sizes) == waves


@pytest.mark.parametrize("arch", ["gfx950", "gfx1201"])
def test_members_that_differ_in_sgprs_run_in_agreeing_runs(arch, monkeypatch):
    """The split-K launches give their waves different SGPR offsets: a lane-wise instruction then
    runs once per run of members that agree (`Cohort.part`), several waves at a time in some of
    them, on gathered cohorts too, and the bits stay those of the wave-by-wave run (above)."""
    parts = []
    original = dispatch.Cohort.part

    def spy(self, first, count):
        parts.append((count, type(self).__name__))
        return original(self, first, count)

    monkeypatch.setattr(dispatch.Cohort, "part", spy)
    test_lockstep_matches_wave_by_wave(arch, "matmul_4bit-n24")
    assert any(count > 1 for count, _ in parts)
    assert any(kind == "GatheredCohort" for _, kind in parts)


@pytest.mark.parametrize("case", ["skinny_gemm-n16-splitk", "matmul_4bit-n24"])
@pytest.mark.parametrize("arch", ARCHS)
def test_seeded_batches_match_seeded_single_workgroups(arch, case, monkeypatch):
    """A seeded run shuffles workgroups and lets random sets of waves run ahead; with batches, the
    waves of every workgroup in the batch take part in each round together. Split-K partials reduced by the last
    workgroup to arrive, barriers, LDS: the bits and the counts are those of a seeded run of one
    workgroup and one wave at a time, and of the deterministic schedule."""
    call = CASES[case](arch)
    sizes = []

    def spy(program, handlers, lock, cohort, *args):
        sizes.append(len(cohort.members))
        return _run_cohort(program, handlers, lock, cohort, *args)

    monkeypatch.setattr(dispatch, "_run_cohort", spy)
    results = []
    for kwargs in ({"seed": 7}, {"seed": 7, "lockstep": False}, {}):
        dev = EmulatedDevice(arch, 2, **kwargs)
        with hipskinny.on_device(dev):
            out = call()
        results.append((_bits(out), _stats(dev)))
        if kwargs == {"seed": 7}:
            assert sizes and max(sizes) > 1, "the seeded batch never ran waves together"
    assert results[0] == results[1] == results[2]
