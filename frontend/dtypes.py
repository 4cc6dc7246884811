"""Reading dtype arguments (``out_dtype=``, ``dtype=``, ``x_dtype``) in every spelling users write.

One reader for every op and helper: numpy type objects (``np.float16``), ``np.dtype`` instances,
ml_dtypes types (``ml_dtypes.bfloat16``, ``ml_dtypes.float8_e4m3fn``), torch dtypes, and the names
``"float16"``/``"half"``/``"bfloat16"``/``"float32"`` (also ``"torch.float16"`` and the fp8 names).
The answer is always a numpy dtype (bfloat16 and fp8 through ml_dtypes), so callers compare
dtypes, never text.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import InputTypeError

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3FNUZ = np.dtype(ml_dtypes.float8_e4m3fnuz)

HALVES = (F16, BF16)                  # what the kernels compute in
FLOATS = (F16, BF16, F32)             # what weights and states are stored in

_BY_NAME = {"float16": F16, "half": F16, "bfloat16": BF16, "float32": F32, "float": None,
            "float8_e4m3fn": E4M3FN, "float8_e4m3fnuz": E4M3FNUZ}
# "float" is refused on purpose: numpy reads it as float64, torch as float32.


def _torch_dtype_type() -> type | None:
    import sys

    torch = sys.modules.get("torch")    # a torch dtype exists only if torch was imported
    return getattr(torch, "dtype", None) if torch is not None else None


def _lookup(value: Any) -> np.dtype | None:
    if isinstance(value, str):
        return _BY_NAME.get(value.removeprefix("torch."))
    if isinstance(value, np.dtype):
        return value
    if isinstance(value, type) and issubclass(value, np.generic):   # np.float16, ml_dtypes.bfloat16
        return np.dtype(value)
    torch_dtype = _torch_dtype_type()
    if torch_dtype is not None and isinstance(value, torch_dtype):
        return _BY_NAME.get(str(value).removeprefix("torch."))
    return None


def spell(dtypes: tuple[np.dtype, ...]) -> str:
    """``"float16, bfloat16 or float32"``: how messages name a set of dtypes."""
    names = [d.name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def read(value: Any, what: str, accepted: tuple[np.dtype, ...] = FLOATS) -> np.dtype:
    """The numpy dtype ``value`` names, if it is one of ``accepted``; else `InputTypeError` naming
    ``what``, the value's repr and the accepted dtypes."""
    dt = _lookup(value)
    if dt is None or dt not in accepted:
        raise InputTypeError(f"{what} must be {spell(accepted)} (a numpy, ml_dtypes or torch dtype, or its name); "
                             f"got {value!r}")
    return dt


def name_of(value: Any, accepted: tuple[np.dtype, ...] = FLOATS) -> str | None:
    """The accepted dtype's name (``"bfloat16"``) ``value`` spells, or None: for fields that are
    checked later with their own message."""
    dt = _lookup(value)
    return dt.name if dt is not None and dt in accepted else None
