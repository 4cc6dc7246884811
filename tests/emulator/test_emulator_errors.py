"""The emulator's own failures are clear: unknown instruction, bad instruction table, faults, wave sizes."""

from __future__ import annotations

import numpy as np
import pytest

from hipskinny import registry
from hipskinny.arch import arch_info
from hipskinny.codeobject import CodeObject
from hipskinny.emulator import EmulatedDevice
from hipskinny.emulator.listing import listing_text, parse_listing, table_from_listing
from hipskinny.emulator.program import Program
from hipskinny.errors import EmulatorError, EmulatorFault
from hipskinny.launch import make_plan


def _listing(arch: str) -> str:
    """The shipped gemv code object's instructions as listing text (to edit)."""
    image, entry = registry.read_verified(arch, "gemv")
    from importlib import resources

    table = resources.files("hipskinny.hsaco").joinpath(entry["instructions"]).read_bytes()
    return listing_text(table, CodeObject.parse(image))


def _launch_gemv(dev: EmulatedDevice, module, m=4, k=64, x_d=None, w_d=None, y_d=None):
    kernel = module.code.kernel("gemv_f16_r1")
    plan = make_plan((module, kernel), kernel, (m, 1, 1), (256, 1, 1))
    x_d = x_d if x_d is not None else dev.alloc(2 * k)
    w_d = w_d if w_d is not None else dev.alloc(2 * m * k)
    y_d = y_d if y_d is not None else dev.alloc(2 * m)
    dev.dispatch(plan.function, plan.grid, plan.block, plan.kernarg((x_d, w_d, 0, y_d, m, k, k)))


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_unknown_instruction_names_mnemonic_arch_kernel_pc(arch):
    image, _ = registry.read_verified(arch, "gemv")
    code = CodeObject.parse(image)
    lines = _listing(arch).splitlines()
    start = lines.index(next(line for line in lines if line.endswith("<gemv_f16_r1>:")))
    victim = next(i for i in range(start, len(lines)) if lines[i].startswith("\tv_"))   # first VALU op
    def encoding(line: str) -> str:
        return line.rsplit("// ", 1)[1].split(": ", 1)[1]

    words = encoding(lines[victim])
    for i, line in enumerate(lines):       # every copy of those bytes: the table keeps one text per encoding
        if line.startswith("\t") and encoding(line) == words:
            lines[i] = "\tv_bogus_b32 " + line.split(" ", 1)[1]
    dev = EmulatedDevice(arch)
    module = dev.load_module(image)
    module.program = Program(code, "\n".join(lines), arch_info(arch))
    module.program.ctx.extra["image_base"] = module.base
    with pytest.raises(EmulatorError) as e:
        _launch_gemv(dev, module)
    msg = str(e.value)
    assert "v_bogus_b32" in msg and arch in msg and "kernel gemv_f16_r1" in msg and "pc 0x" in msg


def test_listing_that_does_not_match_the_binary_is_refused():
    """An instruction whose listed bytes differ from the binary's is refused when first read
    (before any decode or execution), naming the address: the table has no text for the bytes
    the binary holds there."""
    image, _ = registry.read_verified("gfx1100", "gemv")
    code = CodeObject.parse(image)
    text = _listing("gfx1100")
    rows = [ln for ln in text.splitlines() if ln.startswith("\t")]
    words = [ln.rsplit("// ", 1)[1].split(": ", 1)[1] for ln in rows]
    k = next(k for k, w in enumerate(words) if words.count(w) == 1)     # bytes found once in the binary
    line, addr = rows[k], int(rows[k].rsplit("// ", 1)[1].split(": ", 1)[0], 16)
    first = words[k].split()[0]
    bad = line.replace(first, f"{int(first, 16) ^ 1:08X}")
    program = Program(code, text.replace(line, bad), arch_info("gfx1100"))   # instructions are read lazily
    assert program.insts[k + 1].addr > addr                   # the others read fine ...
    with pytest.raises(EmulatorError, match=f"does not match its code object at 0x{addr:x}"):
        program.insts[k]                                      # ... the altered one is refused
    whole, _ = parse_listing(text.replace(line, bad), code)
    with pytest.raises(EmulatorError, match=f"at 0x{addr:x}"):
        whole.verify()                                        # the bulk check names the same instruction
    parse_listing(text, code)[0].verify()                     # and passes the shipped instructions


def test_the_table_of_another_code_object_is_refused():
    """gemv's table read against the gfx942 topk_softmax binary (no shared instructions at gemv's
    first address): the first instruction read is refused."""
    from hipskinny.emulator.device import _table_for
    from hipskinny.emulator.listing import read_table

    gemv, _ = registry.read_verified("gfx942", "gemv")
    other, _ = registry.read_verified("gfx942", "topk_softmax")
    listing, _ = read_table(_table_for(gemv), CodeObject.parse(other))
    with pytest.raises(EmulatorError, match="does not match its code object"):
        listing.verify()


def test_a_table_that_prints_one_encoding_two_ways_is_not_made():
    text = _listing("gfx942")
    line = next(ln for ln in text.splitlines() if ln.startswith("\tv_mov_b32_e32 "))
    words = line.split(": ", 1)[1]
    other = next(ln for ln in text.splitlines() if ln.startswith("\ts_waitcnt ") and words not in ln)
    duplicate = "\t" + other.split("//")[0].strip() + " // " + other.split("// ", 1)[1].split(": ")[0] + ": " + words
    with pytest.raises(ValueError, match="as .* and as"):
        table_from_listing(text.replace(other, duplicate, 1))


def test_out_of_bounds_weights_fault_with_lane_and_address():
    dev = EmulatedDevice("gfx950")
    module = registry.load(dev, "gemv").handle
    m, k = 4, 64
    w_short = dev.alloc(2 * m * k - 16)              # the last row is 8 elements short
    with pytest.raises(EmulatorFault) as e:
        _launch_gemv(dev, module, m, k, w_d=w_short)
    msg = str(e.value)
    assert "kernel gemv_f16_r1" in msg and "lane" in msg and "0x" in msg and "nearest allocation" in msg


def test_null_bias_pointer_is_never_dereferenced_but_null_output_faults():
    dev = EmulatedDevice("gfx1151")
    module = registry.load(dev, "gemv").handle
    with pytest.raises(EmulatorFault, match="outside every allocation"):
        _launch_gemv(dev, module, y_d=0)


def test_freed_memory_faults_and_host_copies_are_checked():
    dev = EmulatedDevice("gfx942")
    p = dev.alloc(64)
    dev.free(p)
    with pytest.raises(EmulatorFault):
        dev.copy_to_device(p, np.zeros(16, np.uint8), 16)
    q = dev.alloc(16)
    with pytest.raises(EmulatorFault):
        dev.copy_to_host(np.zeros(32, np.uint8), q, 32)


def test_code_object_of_another_arch_is_refused():
    image, _ = registry.read_verified("gfx942", "gemv")
    with pytest.raises(EmulatorError, match="gfx942 cannot run on the emulated gfx1100"):
        EmulatedDevice("gfx1100").load_module(image)
