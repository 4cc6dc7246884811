"""Program control in the emulator: s_call_b64 / s_swappc_b64 / s_setpc_b64 with s_getpc_b64,
and s_sendmsg. Kernels: tests/kernels/asm/control.s (the header says what they write);
expected values follow the ISA rules (PCs are byte addresses; a saved return address is the
address of the next instruction)."""

from __future__ import annotations

import numpy as np
import pytest
from emulated import from_device, launch, load_test_kernel, to_device

from hipskinny.arch import ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.errors import EmulatorError, EmulatorFault

ALL_ARCHS = list(ARCHS)
SENTINEL = 0xDEADBEEF


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_calls_and_returns(arch):
    dev = EmulatedDevice(arch, num_cus=4)
    module, _ = load_test_kernel(dev, "control")
    n = 128                                       # 2 or 4 waves: the subroutines run once per wave
    out = to_device(dev, np.full((n, 4), SENTINEL, np.uint32))
    stats = launch(dev, module, "control", 1, n, [out])
    rec = from_device(dev, out, (n, 4), np.uint32)
    i = np.arange(n, dtype=np.uint32)
    np.testing.assert_array_equal(rec[:, 0], (i + 1 + 10) * 2 * 3, err_msg="s_call_b64 / s_swappc_b64 round trip")
    np.testing.assert_array_equal(rec[:, 1], 0, err_msg="s_call_b64 saves the address of the next instruction")
    np.testing.assert_array_equal(rec[:, 2], 0, err_msg="s_swappc_b64 saves the address of the next instruction")
    np.testing.assert_array_equal(rec[:, 3], i + 20, err_msg="a subroutine called twice in a row")
    waves = n // ARCHS[arch].wave_size
    assert stats.mnemonics["s_call_b64"] == 3 * waves
    assert stats.mnemonics["s_swappc_b64"] == waves
    assert stats.mnemonics["s_setpc_b64"] == 4 * waves
    if arch not in ("gfx942", "gfx950"):          # gfx11/12 end with s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)
        assert stats.mnemonics["s_sendmsg"] == waves


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_setpc_to_the_middle_of_an_instruction_faults(arch):
    dev = EmulatedDevice(arch, num_cus=4)
    module, code = load_test_kernel(dev, "control")
    out = to_device(dev, np.zeros(4, np.uint32))
    entry = code.kernel("setpc_bad").entry
    with pytest.raises(EmulatorFault) as e:
        launch(dev, module, "setpc_bad", 1, ARCHS[arch].wave_size, [out])
    msg = str(e.value)
    # s_getpc_b64 at the entry gives entry + 4; the kernel adds 2; s_setpc_b64 is at entry + 12
    assert f"jump to 0x{module.base + entry + 6:x}" in msg, msg
    assert f"kernel setpc_bad pc 0x{entry + 12:x}" in msg and arch in msg, msg


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_sendmsg_other_than_dealloc_vgprs_is_refused(arch):
    dev = EmulatedDevice(arch, num_cus=4)
    module, _ = load_test_kernel(dev, "control")
    out = to_device(dev, np.zeros(4, np.uint32))
    with pytest.raises(EmulatorError, match="MSG_INTERRUPT") as e:
        launch(dev, module, "sendmsg_other", 1, ARCHS[arch].wave_size, [out])
    msg = str(e.value)
    assert "not implemented" in msg and arch in msg and "kernel sendmsg_other" in msg, msg


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_launch_profile_by_address(arch):
    """LaunchStats.by_address: the wave-instructions each code address ran, summing to the launch's
    count; the kernel's first instruction ran once per wave, its subroutines' once per call."""
    dev = EmulatedDevice(arch, num_cus=4)
    module, code = load_test_kernel(dev, "control")
    n = 128
    out = to_device(dev, np.zeros((n, 4), np.uint32))
    stats = launch(dev, module, "control", 1, n, [out])
    waves = n // ARCHS[arch].wave_size
    assert sum(stats.by_address.values()) == sum(stats.mnemonics.values()) == stats.total_instructions
    assert stats.by_address[code.kernel("control").entry] == waves
    assert max(stats.by_address.values()) > waves       # the subroutine called several times per wave
