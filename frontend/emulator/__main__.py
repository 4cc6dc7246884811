"""``python -m hipskinny.emulator <arch> <family>``: a shipped code object's instructions as the
emulator reads them (checked against the binary), in llvm-objdump's layout."""

from __future__ import annotations

import sys
from importlib import resources

from .. import registry
from ..codeobject import CodeObject
from ..errors import CodeObjectError, UnsupportedArchError
from .listing import listing_text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m hipskinny.emulator <arch> <family>", file=sys.stderr)
        return 2
    try:
        image, entry = registry.read_verified(*args)
    except (CodeObjectError, UnsupportedArchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = resources.files("hipskinny.hsaco").joinpath(entry["instructions"]).read_bytes()
    sys.stdout.write(listing_text(table, CodeObject.parse(image)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
