"""hsaco/manifest.json: what was built, from which sources, with which compiler.

Schema 2 (1 shipped gzip'ed listings, ``listing``/``listing_sha256``)::

    {"schema": 2,
     "compiler": {"kind": "clang" | "hipcc", "version": <first line of --version>,
                  "hip_headers": "triton==3.5.1" | "rocm"},
     "archs": [<arch>, ...],                       # archs present, in hipskinny.arch order
     "code_objects": {"<arch>/<family>": {
         "arch", "family", "path", "sha256",
         "instructions", "instructions_sha256",      # the emulator's instruction table (.itab)
         "flags": [...], "sources": {<repo-relative path>: <sha256>},
         "launch_flags": {<name>: <bit>, ...},     # the source's `enum Flags : int` (kFooBar -> foo_bar)
         "launch_facts": {<name>: <int>, ...},     # the source's `enum Facts : int`: numbers the planner needs
         "kernels": [{"name", "config", "vgpr_count", "agpr_count", "sgpr_count",
                      "vgpr_spill_count", "sgpr_spill_count", "group_segment_fixed_size",
                      "private_segment_fixed_size", "wavefront_size", "max_flat_workgroup_size",
                      "kernarg_segment_size", "args": [[name, offset, size, value_kind], ...],
                      "occupancy"}, ...]}}}

Written with sorted keys, indent 1 and a trailing newline, so it is byte-reproducible.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hipskinny.arch import ARCHS
from hipskinny.codeobject import Kernel

SCHEMA = 2
_KEY_INT = re.compile(r"([A-Za-z]+)(\d+)")
_ENUM = r"\benum\s+{}\s*:\s*int\s*\{{([^}}]*)\}}"
_ITEM = re.compile(r"\s*k([A-Z][A-Za-z0-9]*)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*")
_DTYPE = re.compile(r"[A-Za-z0-9]+")


class ManifestError(Exception):
    """hsaco/manifest.json is unreadable or has an unknown schema."""


def kernel_config(name: str, family: str) -> dict[str, Any]:
    """``<family>_<dtype>[_<key><int>]*[_<flag>]*`` (flags after at least one key) ->
    {"dtype": ..., key: int, flag: True, ...}; {} otherwise."""
    prefix = family + "_"
    if not name.startswith(prefix):
        return {}
    dtype, *rest = name[len(prefix):].split("_")
    if not _DTYPE.fullmatch(dtype):
        return {}
    config: dict[str, Any] = {"dtype": dtype}
    for token in rest:
        m = _KEY_INT.fullmatch(token)
        # A flag only after a key<int>: "lds_reverse_missing_barrier" is not a config.
        key, value = (m.group(1), int(m.group(2))) if m else (token, True)
        if not key.isalpha() or key in config or (m is None and len(config) < 2):
            return {}
        config[key] = value
    return config


def _enum_items(text: str, enum: str, where: str) -> dict[str, int]:
    """{snake_name: value} of a source's ``enum <enum> : int { kName = <int>, .. }`` (at most one)."""
    found = re.findall(_ENUM.format(enum), text)
    if len(found) > 1:
        raise ManifestError(f"{where}: more than one `enum {enum} : int`")
    items: dict[str, int] = {}
    for item in found[0].split(",") if found else ():
        m = _ITEM.fullmatch(item)
        if m is None:
            raise ManifestError(f"{where}: enum {enum} item {item.strip()!r} is not `kName = <int>`")
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()
        if name in items:
            raise ManifestError(f"{where}: enum {enum} names {name!r} twice")
        items[name] = int(m.group(2), 0)
    return items


def launch_flags(text: str, where: str) -> dict[str, int]:
    """The bits of a kernel source's ``flags`` argument, from its ``enum Flags : int { kName = bit, .. }``
    (at most one; names in snake case: kXFp8 -> x_fp8), so that the planner reads them from the manifest
    instead of restating them. {} when the source declares none."""
    flags = _enum_items(text, "Flags", where)
    bits = list(flags.values())
    if any(b <= 0 or b & (b - 1) for b in bits) or len(set(bits)) != len(bits):
        raise ManifestError(f"{where}: enum Flags needs distinct single bits; got {flags}")
    return flags


def launch_facts(text: str, where: str) -> dict[str, int]:
    """The numbers a kernel source's planner needs (tile sizes, limits), from its ``enum Facts : int
    { kName = <int>, .. }`` (snake-case names), so that Python does not restate them. {} when none."""
    return _enum_items(text, "Facts", where)


def kernel_args(kernel: Kernel) -> list[list[Any]]:
    """[name, offset, size, value kind] of each explicit argument, in order (read back at load by
    `hipskinny.registry` against the code object's own metadata)."""
    return [[a.param, a.offset, a.size, a.value_kind] for a in kernel.explicit_args]


def kernel_entry(kernel: Kernel, arch: str, family: str) -> dict[str, Any]:
    waves = max(1, kernel.max_flat_workgroup_size // kernel.wavefront_size)
    return {
        "name": kernel.name,
        "config": kernel_config(kernel.name, family),
        "vgpr_count": kernel.vgpr_count,
        "agpr_count": kernel.agpr_count,
        "sgpr_count": kernel.sgpr_count,
        "vgpr_spill_count": kernel.vgpr_spill_count,
        "sgpr_spill_count": kernel.sgpr_spill_count,
        "group_segment_fixed_size": kernel.group_segment_fixed_size,
        "private_segment_fixed_size": kernel.private_segment_fixed_size,
        "wavefront_size": kernel.wavefront_size,
        "max_flat_workgroup_size": kernel.max_flat_workgroup_size,
        "kernarg_segment_size": kernel.kernarg_segment_size,
        "args": kernel_args(kernel),
        "occupancy": ARCHS[arch].occupancy(kernel.vgpr_count, kernel.group_segment_fixed_size, waves),
    }


def compose(compiler: dict[str, str], entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    present = {e["arch"] for e in entries.values()}
    return {
        "schema": SCHEMA,
        "compiler": compiler,
        "archs": [a for a in ARCHS if a in present] + sorted(present - set(ARCHS)),
        "code_objects": entries,
    }


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, indent=1) + "\n"


def load(path: Path) -> dict[str, Any] | None:
    """The manifest at `path`, or None if there is none."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ManifestError(f"{path} has schema {data.get('schema') if isinstance(data, dict) else None!r}, "
                            f"this build_scripts writes schema {SCHEMA}")
    if not isinstance(data.get("code_objects"), dict) or not isinstance(data.get("compiler"), dict):
        raise ManifestError(f"{path} lacks 'code_objects' or 'compiler'")
    return data
