"""Devices are freed when their users let go of them (issue 55: a test worker grew to 9 GB).

What held them: the registry's and the scratch pools' per-device tables, keyed weakly by the device
but holding it strongly in their values, and the plan and bound-call caches, keyed by it. The
emulated devices are the heavy ones (their decoded programs and memory), so they are the ones
checked here; the rules are the same for every device.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np

import hipskinny
from hipskinny import launch, registry, scratch
from hipskinny.emulator import EmulatedDevice


def _gone(ref: weakref.ref) -> bool:
    gc.collect()
    return ref() is None


def test_a_device_with_loaded_code_objects_and_scratch_is_freed():
    dev = EmulatedDevice("gfx1100")
    registry.load(dev, "skinny_gemm")
    scratch.pool(dev, 0).buffer("test.slot", 1 << 16)
    ref = weakref.ref(dev)
    del dev
    assert _gone(ref)


def test_caches_hold_at_most_max_cached_devices():
    """Ops run on many short-lived devices: the plan and call caches keep at most
    `launch.MAX_CACHED_DEVICES` of them alive (all of them, before)."""
    x, w = np.ones((1, 64), np.float16), np.ones((32, 64), np.float16)
    keeper = EmulatedDevice("gfx1100", 1)            # holds the shared program: decoded once, not per device
    registry.load(keeper, "skinny_gemm")
    refs = []
    for _ in range(2 * launch.MAX_CACHED_DEVICES + 3):
        dev = EmulatedDevice("gfx1100", 1)
        with hipskinny.on_device(dev):
            assert float(hipskinny.skinny_gemm(x, w)[0, 0]) == 64.0
        refs.append(weakref.ref(dev))
        del dev
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive <= launch.MAX_CACHED_DEVICES, f"{alive} of {len(refs)} devices still alive"
    launch.forget_devices()
    gc.collect()                    # once: late in a suite run a full collection takes seconds
    assert all(r() is None for r in refs)


def test_devices_of_an_arch_share_the_decoded_code():
    """Every device of an arch maps a code object at the same address, so they share one decoded
    program and one read-only image (a program per device cost tens of MB); a host-backed device
    (its memory at host addresses) decodes its own, on the same parsed listing."""
    a, b = EmulatedDevice("gfx942"), EmulatedDevice("gfx942", 3)
    ma, mb = (registry.load(d, "skinny_gemm").handle for d in (a, b))
    assert ma.base == mb.base and ma.program is mb.program
    image = a.memory.find(ma.base).data
    assert image is b.memory.find(mb.base).data and not image.flags.writeable
    host = registry.load(EmulatedDevice("gfx942", host_backed=True), "skinny_gemm").handle
    assert host.program is not ma.program and host.program.insts is ma.program.insts


def test_a_read_table_costs_a_few_bytes_per_instruction():
    """gfx942's fp8_linear code object (some 300k instructions, 70k distinct encodings): its read
    instruction table keeps 17 bytes an instruction (its size, its address, a slot for its `Inst`
    once read) and each distinct encoding and text once, with their lookup: 62 bytes an instruction
    in all, where the listing's text alone took 92 (and its lines split into strings over 300:
    about 2 GB for every arch's code objects, which a test worker loads)."""
    import tracemalloc

    from hipskinny.codeobject import CodeObject
    from hipskinny.emulator.device import _table_for
    from hipskinny.emulator.listing import read_table

    image, _ = registry.read_verified("gfx942", "fp8_linear")
    table, code = _table_for(image), CodeObject.parse(image)
    tracemalloc.start()
    try:
        listing, _ = read_table(table, code)
        listing[0]                             # reading one builds the lookup of the distinct encodings
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(listing) > 100_000
    assert size < 72 * len(listing), f"{size / len(listing):.0f} bytes per instruction"
