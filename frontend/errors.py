"""The package's exception hierarchy.

Every error raised on purpose by hipskinny derives from :class:`HipSkinnyError`.
Errors about a bad argument also derive from the builtin a numpy or torch user
would expect (``TypeError`` for a wrong dtype or container, ``ValueError`` for a
wrong shape or value), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

PROBE_HINT = "Run `hipskinny probe` for a report of devices, archs and versions."


class HipSkinnyError(Exception):
    """Base class of every error hipskinny raises on purpose."""


class InputTypeError(HipSkinnyError, TypeError):
    """An argument has an unsupported dtype or container type."""


class InputValueError(HipSkinnyError, ValueError):
    """An argument has an unsupported shape, stride, alignment or value."""


class UnsupportedArchError(HipSkinnyError):
    """The GPU's architecture is not one hipskinny ships code objects for."""


class DeviceMismatchError(HipSkinnyError, ValueError):
    """Operands live on different devices, or on a device hipskinny cannot use."""


class HipRuntimeError(HipSkinnyError, RuntimeError):
    """The HIP runtime is missing, too old/new for hip-python, or a HIP call failed."""


class CodeObjectError(HipSkinnyError):
    """A shipped code object is missing, corrupted, stale, or does not match a call."""


class KernelArgumentError(HipSkinnyError, TypeError):
    """A launch passed arguments that do not match the kernel's metadata signature."""


class EmulatorError(HipSkinnyError, RuntimeError):
    """The CPU emulator cannot run a kernel (an instruction it does not implement, a
    listing that does not match its binary, a runaway wave)."""


class EmulatorFault(EmulatorError):
    """A kernel running on the emulator accessed memory outside every allocation
    (the emulator's equivalent of a GPU memory fault)."""


class CaptureError(HipSkinnyError, RuntimeError):
    """A call needed something a HIP graph capture forbids (allocation, copy, synchronization):
    warm up and `hipskinny.reserve` before capturing."""
