"""hipskinny: prebuilt HIP decode kernels for AMD GPUs, called from torch or numpy.

Importing the package needs neither a GPU nor a HIP runtime; the first kernel
call finds a device (see `use_device`).
"""

from __future__ import annotations

from .errors import (  # noqa: E402
    CaptureError,
    CodeObjectError,
    DeviceMismatchError,
    HipRuntimeError,
    HipSkinnyError,
    InputTypeError,
    InputValueError,
    KernelArgumentError,
    UnsupportedArchError,
)


def __getattr__(name: str):  # lazy: keep `import hipskinny` light (build_scripts imports it too)
    value = _lazy(name)
    globals()[name] = value     # found once: later lookups are plain attribute reads (ops are hot)
    return value


# Public namespaces: a data format with the ops on it (`formats/`).
_NAMESPACES = ("fp8", "bnb", "w4a16", "moe", "mla")


def _lazy(name: str):
    if name in _NAMESPACES:
        return _importlib.import_module(f"{__name__}.{name}")
    if name == "probe":
        from .capability import probe

        return probe
    if name == "reserve":
        from .scratch import reserve

        return reserve
    if name in ("use_device", "on_device", "current_device"):
        from . import devices

        return getattr(devices, name)
    if name in ops.public_names():      # every op module ``ops/<op>.py``: <op> and <op>_reference
        return getattr(ops.op_module(name.removesuffix("_reference")), name)
    raise AttributeError(f"module 'hipskinny' has no attribute {name!r}")


import importlib as _importlib  # noqa: E402

# The op modules, found by name (`ops.public_names`); imported directly, not by `from . import`, which
# would first ask `__getattr__` for the name.
ops = _importlib.import_module(f"{__name__}.ops")
from . import torch_ops as _torch_ops  # noqa: E402
from .version import __version__  # noqa: E402

_torch_ops.install()   # torch.ops.hipskinny.*: now if torch is imported, else right after it is

__all__ = [
    "CaptureError", "CodeObjectError", "DeviceMismatchError", "HipRuntimeError", "HipSkinnyError", "InputTypeError",
    "InputValueError", "KernelArgumentError", "UnsupportedArchError", "__version__", "current_device", "on_device",
    "probe", "reserve", "use_device", *_NAMESPACES, *ops.public_names(),
]
