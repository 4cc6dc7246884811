"""How fast the emulator runs a GEMV-like instruction mix, per arch (wave-instructions/s).

    python benchmarks/emulator_rate.py

Target: >= 100,000 wave-instructions per second on the 2-core CI machine.
"""

from __future__ import annotations

import sys

import numpy as np

import hipskinny
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4096)).astype(np.float16)
    w = rng.standard_normal((256, 4096)).astype(np.float16)
    print(f"{'arch':8} {'wave-instr':>10} {'seconds':>8} {'rate/s':>10}")
    for arch in SHIPPED_ARCHS:
        dev = EmulatedDevice(arch)
        with hipskinny.on_device(dev):
            hipskinny.gemv(x, w)            # decode and load once
            hipskinny.gemv(x, w)
        s = dev.last_launch_stats
        print(f"{arch:8} {s.total_instructions:10} {s.seconds:8.3f} {s.rate:10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
