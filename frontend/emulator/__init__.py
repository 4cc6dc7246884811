"""The CPU emulator: runs hipskinny's real code objects for every shipped arch.

`EmulatedDevice(arch, num_cus)` implements the device interface; select it with
``hipskinny.use_device("emulator:gfx1201")`` or ``HIPSKINNY_DEVICE``.
"""

from .device import EmulatedDevice, register_listing
from .stats import LaunchStats

__all__ = ["EmulatedDevice", "LaunchStats", "register_listing"]
