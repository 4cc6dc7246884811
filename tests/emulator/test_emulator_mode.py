"""The float MODE from the kernel descriptor (COMPUTE_PGM_RSRC1): settings the emulator does not
implement are refused at launch, naming kernel, field and value; MODE.FP16_OVFL saturates the
f16 results of every instruction family that produces them (the f32 -> f16 / fp8 conversions
are covered from real kernels in test_emulator_asm.py).

FP16_OVFL (ISA manuals, MODE register): an f16 result that overflows is clamped to +-65504
whatever the rounding mode, while a true infinity (from an infinite source) stays infinite."""

from __future__ import annotations

import json

import numpy as np
import pytest
from emulated import HSACO_DIR, from_device, load_test_kernel, to_device

from hipskinny import registry
from hipskinny.arch import ARCHS
from hipskinny.codeobject import CodeObject
from hipskinny.emulator import EmulatedDevice, register_listing
from hipskinny.emulator.descriptor import descriptor_of
from hipskinny.emulator.listing import Inst, parse_instruction
from hipskinny.emulator.ops import DecodeContext, load_all, lookup
from hipskinny.emulator.state import Wave
from hipskinny.errors import EmulatorError
from hipskinny.launch import make_plan

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # inf results are the point here

RSRC1 = 48                      # byte offset of COMPUTE_PGM_RSRC1 in the 64-byte kernel descriptor
INF = np.inf


# --- descriptor MODE the emulator does not implement ---------------------------------------------

def patched_control(arch: str, kernel: str, lo: int, width: int, value: int) -> bytes:
    """tests/hsaco/<arch>/control.hsaco with bits lo..lo+width-1 of `kernel`'s RSRC1 set to `value`
    (the descriptor is data, so the instruction table still matches the code and is registered for the copy)."""
    entry = json.loads((HSACO_DIR / "manifest.json").read_text())["code_objects"][f"{arch}/control"]
    image = (HSACO_DIR / entry["path"]).read_bytes()
    code = CodeObject.parse(image)
    address = code.kernel(kernel).descriptor_address
    seg = next(s for s in code.load_segments if s.vaddr <= address < s.vaddr + s.filesz)
    at = seg.offset + address - seg.vaddr + RSRC1
    rsrc1 = int.from_bytes(image[at:at + 4], "little")
    field = ((1 << width) - 1) << lo
    rsrc1 = (rsrc1 & ~field) | (value << lo)
    patched = image[:at] + rsrc1.to_bytes(4, "little") + image[at + 4:]
    register_listing(patched, (HSACO_DIR / entry["instructions"]).read_bytes())
    return patched


# (field as the message names it, descriptor attribute, first bit, width, value to set)
UNSUPPORTED = [
    ("FLOAT_ROUND_MODE_32", "float_round_mode_32", 12, 2, 3),
    ("FLOAT_ROUND_MODE_16_64", "float_round_mode_16_64", 14, 2, 1),
    ("FLOAT_DENORM_MODE_32", "float_denorm_mode_32", 16, 2, 0),
    ("FLOAT_DENORM_MODE_16_64", "float_denorm_mode_16_64", 18, 2, 2),
    ("ENABLE_DX10_CLAMP", "enable_dx10_clamp", 21, 1, 0),
    ("ENABLE_IEEE_MODE", "enable_ieee_mode", 23, 1, 0),
]


# gfx12 has no DX10_CLAMP / IEEE bits (bits 21 and 23 mean other things there).
MODE_CASES = [(arch, *u) for arch in ("gfx942", "gfx1100", "gfx1201") for u in UNSUPPORTED
              if not (arch == "gfx1201" and u[1] in ("enable_dx10_clamp", "enable_ieee_mode"))]


@pytest.mark.parametrize("arch,field,attr,lo,width,value", MODE_CASES, ids=[f"{c[0]}-{c[1]}" for c in MODE_CASES])
def test_unsupported_descriptor_mode_is_refused_at_launch(arch, field, attr, lo, width, value):
    image = patched_control(arch, "control", lo, width, value)
    kernel = CodeObject.parse(image).kernel("control")
    assert int(getattr(descriptor_of(kernel, arch), attr)) == value
    dev = EmulatedDevice(arch, num_cus=4)
    module = dev.load_module(image)
    function = dev.get_function(module, "control")
    out = to_device(dev, np.full(256, 0xDEADBEEF, np.uint32))
    plan = make_plan(function, kernel, (1, 1, 1), (64, 1, 1), 0)
    with pytest.raises(EmulatorError) as e:
        dev.dispatch(function, (1, 1, 1), (64, 1, 1), plan.kernarg([out]))
    msg = str(e.value)
    assert f"kernel control ({arch})" in msg and f"{field} = {value}" in msg and "implements only" in msg, msg
    assert (from_device(dev, out, 256, np.uint32) == 0xDEADBEEF).all(), "nothing may run"


def test_the_other_kernels_of_the_code_object_still_run():
    """The check is per kernel: patching `setpc_bad` leaves `control` of the same image runnable."""
    image = patched_control("gfx1100", "setpc_bad", 16, 2, 0)
    dev = EmulatedDevice("gfx1100", num_cus=4)
    module = dev.load_module(image)
    kernel = CodeObject.parse(image).kernel("control")
    function = dev.get_function(module, "control")
    out = to_device(dev, np.zeros((32, 4), np.uint32))
    plan = make_plan(function, kernel, (1, 1, 1), (32, 1, 1), 0)
    dev.dispatch(function, (1, 1, 1), (32, 1, 1), plan.kernarg([out]))
    assert from_device(dev, out, (32, 4), np.uint32)[:, 0].tolist() == [(i + 11) * 6 for i in range(32)]


def test_built_kernels_use_the_implemented_mode():
    """The GEMV and every test kernel pass the check: clang's MODE is the one the emulator implements."""
    for arch in ARCHS:
        dev = EmulatedDevice(arch)
        module = dev.load_module(registry.read_verified(arch, "gemv")[0])
        for k in module.code.kernels:
            module.program.handlers_for(k)          # raises if the MODE is refused
    for path in sorted(HSACO_DIR.glob("*/*.hsaco")):
        dev = EmulatedDevice(path.parent.name)
        module, code = load_test_kernel(dev, path.stem)
        for k in code.kernels:
            module.program.handlers_for(k)


# --- FP16_OVFL on each family of f16-producing instructions -----------------------------------

ARCH = {"gfx942": (9, 64, "fnuz"), "gfx950": (9, 64, "ocp"), "gfx1100": (11, 32, None), "gfx1201": (12, 32, "ocp")}


def run(text: str, arch: str, regs: dict[int, np.ndarray], ovfl: bool) -> Wave:
    load_all()
    gfx, n, f8 = ARCH[arch]
    mnemonic, ops, mods = parse_instruction(text)
    found = lookup(mnemonic)
    assert found is not None, mnemonic
    extra = {"fp16_ovfl": True} if ovfl else {}
    handler = found[0](Inst(0x1000, 8, text, mnemonic, ops, mods, b""), DecodeContext(arch, gfx, n, f8, {}, extra))
    w = Wave(n, gfx == 9, None, 0)
    w.set_exec((1 << n) - 1)
    for r, bits in regs.items():
        w.v[r] = np.resize(np.asarray(bits, np.uint32), n)
    handler(w)
    return w


def h(values) -> np.ndarray:
    return np.asarray(values, np.float16).view(np.uint16).astype(np.uint32)


def pack(lo, hi) -> np.ndarray:
    return h(lo) | (h(hi) << 16)


def f(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


MAX, NMAX, PINF, NINF = 0x7BFF, 0xFBFF, 0x7C00, 0xFC00


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_fp16_ovfl_lanewise_f16_ops(arch):
    a = [60000.0, -60000.0, INF, 1.0, -INF, 65504.0]
    b = [60000.0, -60000.0, 1.0, 2.0, -1.0, 16.0]
    regs = {1: h(a), 2: h(b), 3: np.zeros(6, np.uint32)}
    add_off = run("v_add_f16_e32 v3, v1, v2", arch, regs, False).v[3, :6] & 0xFFFF
    add_on = run("v_add_f16_e32 v3, v1, v2", arch, regs, True).v[3, :6] & 0xFFFF
    assert add_off.tolist() == [PINF, NINF, PINF, int(h(3.0)), NINF, PINF]
    assert add_on.tolist() == [MAX, NMAX, PINF, int(h(3.0)), NINF, MAX]          # a true inf stays inf
    # the output modifier can overflow too: 2 * 60000 from finite sources saturates, 2 * inf does not
    mul = run("v_mul_f16_e64 v3, v1, v2 mul:2", arch, {1: h(a), 2: h([1.0] * 6), 3: np.zeros(6, np.uint32)}, True)
    assert (mul.v[3, :6] & 0xFFFF).tolist() == [MAX, NMAX, PINF, int(h(2.0)), NINF, MAX]
    nan = run("v_add_f16_e32 v3, v1, v2", arch, {1: h([np.nan]), 2: h([1.0])}, True).v[3, 0] & 0xFFFF
    assert (nan & 0x7E00) == 0x7E00, "NaN stays NaN"


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_fp16_ovfl_packed_and_mixed_ops(arch):
    regs = {1: pack([60000.0, INF], [-60000.0, 2.0]), 2: pack([60000.0, 1.0], [-60000.0, 3.0])}
    got = run("v_pk_add_f16 v3, v1, v2", arch, regs, True).v[3, :2]
    assert [int(got[0]) & 0xFFFF, int(got[0]) >> 16] == [MAX, NMAX]
    assert [int(got[1]) & 0xFFFF, int(got[1]) >> 16] == [PINF, int(h(5.0))]
    off = run("v_pk_add_f16 v3, v1, v2", arch, regs, False).v[3, 0]
    assert [int(off) & 0xFFFF, int(off) >> 16] == [PINF, NINF]
    # v_fma_mixlo_f16 with f32 sources: 1e5 * 1 + 0 rounds past the f16 range
    regs = {1: f([1e5, -1e5, INF]), 2: f([1.0, 1.0, 1.0]), 3: np.zeros(3, np.uint32)}
    mix = run("v_fma_mixlo_f16 v3, v1, v2, v3", arch, regs, True).v[3, :3] & 0xFFFF
    assert mix.tolist() == [MAX, NMAX, PINF]


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_fp16_ovfl_dot2_f16_f16(arch):
    regs = {1: pack([200.0, INF], [200.0, 1.0]), 2: pack([200.0, 1.0], [200.0, 1.0]), 3: h([0.0, 0.0])}
    on = run("v_dot2_f16_f16 v3, v1, v2, v3", arch, regs, True).v[3, :2] & 0xFFFF
    off = run("v_dot2_f16_f16 v3, v1, v2, v3", arch, regs, False).v[3, :2] & 0xFFFF
    assert on.tolist() == [MAX, PINF] and off.tolist() == [PINF, PINF]       # 80000 overflows; inf is true


def test_fp16_ovfl_cvt_pk_f16_f32():
    regs = {1: f([1e5, INF, 1.0]), 2: f([-70000.0, 2.0, -INF])}
    got = run("v_cvt_pk_f16_f32 v3, v1, v2", "gfx950", regs, True).v[3, :3]
    assert [(int(x) & 0xFFFF, int(x) >> 16) for x in got] == [(MAX, NMAX), (PINF, int(h(2.0))), (int(h(1.0)), NINF)]


@pytest.mark.parametrize("ovfl,c,want", [(True, 0.0, MAX), (False, 0.0, PINF), (True, INF, PINF)])
def test_fp16_ovfl_wmma_f16_result(ovfl, c, want):
    """Every A and B element 100, K = 16: each D element is 160000 + C, past the f16 range."""
    regs = {r: pack([100.0] * 32, [100.0] * 32) for r in range(4, 12)}
    regs.update({r: pack([c] * 32, [c] * 32) for r in range(12, 16)})
    w = run("v_wmma_f16_16x16x16_f16 v[0:3], v[4:7], v[8:11], v[12:15]", "gfx1201", regs, ovfl)
    d = w.v[0:4]
    assert ((d & 0xFFFF) == want).all() and ((d >> 16) == want).all()
