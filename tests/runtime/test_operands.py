"""The shared operand layer (frontend/operands.py), the scratch pool's graph rules and per-thread
device selection, in-process on the emulator. (GPU-resident operands, the fake HIP runtime's
capture and two GPUs: tests/runtime/test_call_path_hip.py.)"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch

import hipskinny
from hipskinny import CaptureError, operands, scratch
from hipskinny.devices import current_device, parse_device
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import gemv as gemv_op
from hipskinny.ops import skinny_gemm as sg_op


def _xw(n, m, k, seed=0, dtype=np.float16):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, k)).astype(dtype), (rng.standard_normal((m, k)) / 8).astype(dtype)


class CapturingEmulator(EmulatedDevice):
    """An emulated device whose streams can be marked as being captured."""

    capturing: set[int]

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.capturing = set()
        self.allocs = 0

    def is_capturing(self, stream: int = 0) -> bool:
        return stream in self.capturing

    def alloc(self, nbytes):
        self.allocs += 1
        return super().alloc(nbytes)

    def copy_to_device(self, dst, src, nbytes, stream=0):
        if self.capturing:        # as HIP refuses a copy on the null stream during a global capture
            e = hipskinny.HipRuntimeError("hipMemcpyAsync failed: hipErrorStreamCaptureImplicit (906)")
            e.hip_error_code = 906
            raise e
        super().copy_to_device(dst, src, nbytes, stream)


@pytest.fixture(scope="module")
def dev():
    return CapturingEmulator("gfx1201", 2)


def test_seen_signature_binds_once(dev):
    x, w = _xw(2, 24, 40)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    with hipskinny.on_device(dev):
        before = sg_op._calls.binds
        ys = [hipskinny.skinny_gemm(x, w) for _ in range(3)]
        assert sg_op._calls.binds == before + 1
        yt = [hipskinny.skinny_gemm(xt, wt) for _ in range(2)]
        assert sg_op._calls.binds == before + 2          # another container kind: one more bind
        hipskinny.skinny_gemm(np.asfortranarray(x), w)    # other strides: another signature
        assert sg_op._calls.binds == before + 3
        hipskinny.skinny_gemm(x, w, deterministic=False)  # an option is part of the signature
        assert sg_op._calls.binds == before + 4
    for y in ys[1:] + [t.numpy() for t in yt]:
        assert np.array_equal(y.view(np.uint16), ys[0].view(np.uint16))


def test_cached_call_still_checks_per_call_facts(dev):
    """What a signature cannot prove is checked on every call: here, out= being read-only."""
    x, w = _xw(1, 8, 16)
    out = np.empty((1, 8), np.float16)
    with hipskinny.on_device(dev):
        hipskinny.skinny_gemm(x, w, out=out)
        out.flags.writeable = False
        with pytest.raises(hipskinny.InputValueError, match="read-only"):
            hipskinny.skinny_gemm(x, w, out=out)


def test_device_choice_is_per_thread():
    a, b = EmulatedDevice("gfx942", 2), EmulatedDevice("gfx1100", 2)
    x, w = _xw(1, 16, 32)
    seen: dict[str, tuple[str, int]] = {}
    ready = threading.Barrier(2)

    def work(name, device):
        with hipskinny.on_device(device):
            ready.wait()                           # both threads have chosen before either calls
            for _ in range(3):
                hipskinny.gemv(x[0], w)
            seen[name] = (current_device().label, len(device.launches))

    threads = [threading.Thread(target=work, args=("a", a)), threading.Thread(target=work, args=("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": ("emulator:gfx942", 3), "b": ("emulator:gfx1100", 3)}
    assert all(s.kernel.startswith("gemv_f16") for s in (*a.launches, *b.launches))


def test_use_device_none_forgets_the_default(monkeypatch):
    from hipskinny import devices

    monkeypatch.setenv("HIPSKINNY_DEVICE", "emulator:gfx950")
    hipskinny.use_device(None)
    assert current_device().label == "emulator:gfx950"
    monkeypatch.setenv("HIPSKINNY_DEVICE", "emulator:gfx1151")
    assert current_device().label == "emulator:gfx950"      # found once, kept
    hipskinny.use_device(None)
    assert current_device().label == "emulator:gfx1151"     # looked up again
    monkeypatch.delenv("HIPSKINNY_DEVICE")
    hipskinny.use_device(None)
    assert devices.default_device is None


def test_pool_growth_retires_and_never_frees():
    d = CapturingEmulator("gfx942", 2)
    pool = scratch.pool(d, 7)
    first = pool.buffer("s", 1000)
    assert pool.buffer("s", 1024) == first                   # fits: same address, nothing allocated
    second = pool.buffer("s", 5000)
    assert second != first and pool.capacity("s") == 8192
    assert pool.retired_bytes == 1024
    d.memory.view(first, 1024)                               # still allocated
    assert not d.memory.view(second, 8192).any()             # a new slot is zeroed once


def test_pool_read_copies_a_slot_back():
    d = EmulatedDevice("gfx1100", 1)
    pool = scratch.pool(d, 5)
    got = np.full(4, -1, np.int32)
    assert not pool.read("never", got) and (got == -1).all()     # no slot: nothing read, nothing made
    assert pool.capacity("never") == 0
    ptr = pool.buffer("words", 64)
    d.copy_to_device(ptr, np.arange(16, dtype=np.int32), 64)
    assert pool.read("words", got) and got.tolist() == [0, 1, 2, 3]


def test_no_growth_and_no_release_during_capture():
    d = CapturingEmulator("gfx942", 2)
    pool = scratch.pool(d, 3)
    pool.buffer("s", 256)
    d.capturing.add(3)
    allocs = d.allocs
    assert pool.buffer("s", 256)                             # fits: fine while capturing
    with pytest.raises(CaptureError, match=r"hipskinny\.reserve") as e:
        pool.buffer("s", 4096)
    assert "'s'" in str(e.value) and "4096" in str(e.value)
    with pytest.raises(CaptureError, match="release"):
        pool.release()
    assert d.allocs == allocs
    d.capturing.clear()
    pool.release()
    assert pool.capacity("s") == 0


def test_reserve_sizes_a_capture_stream_from_a_warm_up(keep_shards):
    d = CapturingEmulator("gfx1201", 2)
    x, w = _xw(24, 300, 1024, seed=2)
    with hipskinny.on_device(d):
        y = hipskinny.skinny_gemm(x, w)                      # warm-up on stream 0 (host inputs)
        caps = hipskinny.reserve(9)
    warm = scratch.pool(d, 0).capacities()
    assert caps == warm and caps["skinny_gemm.partials"] > 0
    assert hipskinny.reserve(9, device=d, nbytes={"extra": 3000})["extra"] == 4096
    with pytest.raises(hipskinny.InputTypeError, match="stream"):
        hipskinny.reserve("nine", device=d)
    assert y.shape == (24, 300)


def test_host_call_refuses_capture(dev):
    x, w = _xw(1, 8, 16)
    with hipskinny.on_device(dev):
        hipskinny.gemv(x[0], w)
        dev.capturing.add(0)
        try:
            with pytest.raises(CaptureError, match="GPU tensors"):
                hipskinny.gemv(x[0], w)
        finally:
            dev.capturing.clear()


def test_release_forgets_bound_calls(dev):
    x, w = _xw(20, 130, 512, seed=3)
    with hipskinny.on_device(dev):
        y1 = hipskinny.skinny_gemm(x, w)
        binds = sg_op._calls.binds
        scratch.pool(dev, 0).release()
        y2 = hipskinny.skinny_gemm(x, w)                     # rebinds: the old addresses are gone
        assert sg_op._calls.binds == binds + 1
    assert np.array_equal(y1.view(np.uint16), y2.view(np.uint16))


def test_signature_of_each_kind():
    x = np.ones((2, 8), np.float16)
    key, addresses = operands.signature(("x", "out"), (x, None))
    assert addresses is None and key[0] == ((2, 8), (16, 2), x.dtype, True) and key[1] is None
    t = torch.ones((2, 8), dtype=torch.float16)
    key, _ = operands.signature(("x",), (t,))
    assert key[0] == (t.shape, (8, 1), torch.float16, t.device, False, torch.strided)
    sparse = t.to_sparse()
    assert operands.signature(("x",), (sparse,))[0] != operands.signature(("x",), (t.expand(2, 8),))[0]
    with pytest.raises(hipskinny.InputTypeError, match="dense"):
        hipskinny.skinny_gemm(sparse, torch.ones((4, 8), dtype=torch.float16))


def test_gemv_and_skinny_gemm_share_the_layer():
    assert gemv_op._calls is not sg_op._calls
    assert all(c in operands._caches for c in (gemv_op._calls, sg_op._calls))


@pytest.mark.parametrize("spec", ["cuda:0", "cuda", "hip:abc", "hip:-1", "hip:0:1", "gpu", "", "emulator",
                                  "emulator:", "emulator:gfx942:0", "emulator:gfx942:x"])
def test_malformed_device_specs_are_value_errors(spec):
    for select in (hipskinny.use_device, hipskinny.on_device, parse_device):
        with pytest.raises(ValueError, match=f"bad device {re.escape(repr(spec))}") as info:
            cm = select(spec)
            if select is hipskinny.on_device:
                cm.__enter__()
        assert isinstance(info.value, hipskinny.InputValueError)
    assert ("'hip:<ordinal>'" if spec.startswith("hip") else "'emulator:<arch>") in str(info.value)


def test_malformed_hipskinny_device_names_the_variable(monkeypatch):
    monkeypatch.setenv("HIPSKINNY_DEVICE", "cuda:0")
    hipskinny.use_device(None)
    try:
        with pytest.raises(ValueError, match="bad HIPSKINNY_DEVICE 'cuda:0': expected 'hip:<ordinal>' or 'emulator:"):
            current_device()
    finally:
        monkeypatch.delenv("HIPSKINNY_DEVICE")
        hipskinny.use_device(None)


def test_bare_emulator_is_refused_not_gfx942():
    with pytest.raises(hipskinny.InputValueError, match="the emulator needs an arch, 'emulator:<arch>' with arch one "
                                                        "of gfx942, gfx950, gfx1100, gfx1151, gfx1201"):
        hipskinny.use_device("emulator")


def test_device_spec_of_another_type_is_a_type_error():
    with pytest.raises(hipskinny.InputTypeError, match="device must be a string .* got 0"):
        hipskinny.use_device(0)
