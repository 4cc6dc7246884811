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


def _lazy(name: str):
    if name in ("gemv", "gemv_reference"):
        from .ops import gemv as _gemv

        return getattr(_gemv, name)
    if name in ("skinny_gemm", "skinny_gemm_reference"):
        from .ops import skinny_gemm as _skinny_gemm

        return getattr(_skinny_gemm, name)
    if name in ("fp8_linear", "fp8_linear_reference"):
        from .ops import fp8_linear as _fp8_linear

        return getattr(_fp8_linear, name)
    if name in ("matmul_4bit", "matmul_4bit_reference"):
        from .ops import matmul_4bit as _matmul_4bit

        return getattr(_matmul_4bit, name)
    if name in ("w4a16_linear", "w4a16_linear_reference"):
        from .ops import w4a16_linear as _w4a16_linear

        return getattr(_w4a16_linear, name)
    if name in ("fp8", "bnb", "w4a16", "moe", "mla"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "probe":
        from .capability import probe

        return probe
    if name == "reserve":
        from .scratch import reserve

        return reserve
    if name in ("use_device", "on_device", "current_device"):
        from . import devices

        return getattr(devices, name)
    raise AttributeError(f"module 'hipskinny' has no attribute {name!r}")


from . import torch_ops as _torch_ops  # noqa: E402
from .version import __version__  # noqa: E402

_torch_ops.install()   # torch.ops.hipskinny.*: now if torch is imported, else right after it is

__all__ = [
    "CaptureError", "CodeObjectError", "DeviceMismatchError", "HipRuntimeError", "HipSkinnyError", "InputTypeError",
    "InputValueError", "KernelArgumentError", "UnsupportedArchError", "__version__", "current_device", "fp8",
    "mla", "moe",
    "fp8_linear", "fp8_linear_reference", "bnb", "matmul_4bit", "matmul_4bit_reference", "w4a16", "w4a16_linear",
    "w4a16_linear_reference",
    "gemv", "gemv_reference", "on_device", "probe", "reserve", "skinny_gemm", "skinny_gemm_reference", "use_device",
]
