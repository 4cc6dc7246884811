"""``hipskinny.fp8``: FP8 (e4m3) checkpoints' format (`hipskinny.formats.fp8`: quantize, dequantize,
decode, FNUZ <-> OCP conversion). The op on it is `hipskinny.fp8_linear`."""

from __future__ import annotations

from .formats.fp8 import *  # noqa: F403  (the format's public names)
from .formats.fp8 import __all__ as __all__
