"""The instruction table (`.itab`): what the build ships for the emulator instead of a listing."""

from __future__ import annotations

import lzma
import subprocess
import sys

import paths
import pytest

from hipskinny import registry
from hipskinny.arch import ARCHS
from hipskinny.codeobject import CodeObject
from hipskinny.emulator.device import _table_for
from hipskinny.emulator.listing import TABLE_MAGIC, listing_text, read_table, table_from_listing


@pytest.mark.parametrize("arch", list(ARCHS))
def test_table_round_trips_through_its_listing_text(arch):
    """listing_text -> table_from_listing gives the shipped bytes back: the table keeps every
    instruction, address and label of the disassembly it was made from."""
    image, _ = registry.read_verified(arch, "gemv")
    code, table = CodeObject.parse(image), _table_for(image)
    text = listing_text(table, code)
    assert table_from_listing(text) == table
    listing, labels = read_table(table, code)
    assert {k.name for k in code.kernels} <= set(labels)
    assert all(labels[k.name] == k.entry for k in code.kernels)
    assert list(listing.addrs) == sorted(set(listing.addrs))
    assert listing[len(listing) - 1].addr + listing[len(listing) - 1].size <= code.image_size


def test_damaged_table_is_refused():
    image, _ = registry.read_verified("gfx942", "gemv")
    code, table = CodeObject.parse(image), _table_for(image)
    from hipskinny.errors import EmulatorError

    with pytest.raises(EmulatorError, match="not a hipskinny instruction table"):
        read_table(table[:-8], code)
    other = lzma.compress(b"not a table" + lzma.decompress(table)[len(TABLE_MAGIC):])
    with pytest.raises(EmulatorError, match="wrong magic"):
        read_table(other, code)


def test_python_m_emulator_prints_a_code_objects_instructions():
    done = subprocess.run([sys.executable, "-m", "hipskinny.emulator", "gfx1201", "gemv"],
                          capture_output=True, text=True, timeout=120, cwd=paths.REPO)
    assert done.returncode == 0, done.stderr
    assert "<gemv_f16_r1>:" in done.stdout and "s_endpgm" in done.stdout and "// 0000" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "hipskinny.emulator", "gfx1201", "nope"],
                         capture_output=True, text=True, timeout=120, cwd=paths.REPO)
    assert bad.returncode == 1 and "error: kernel family 'nope' is not shipped" in bad.stderr
