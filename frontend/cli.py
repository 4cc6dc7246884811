"""``hipskinny probe [--json]`` and ``hipskinny demo``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hipskinny", description="Prebuilt HIP decode kernels for AMD GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="report devices, archs, kernel families and versions")
    p.add_argument("--json", action="store_true", help="machine-readable output (stable schema)")
    d = sub.add_parser("demo", help="run the GEMV on the GPU, or on the emulator when there is none")
    d.add_argument("--device", help="'hip:0' or 'emulator:<arch>' (default: GPU if present, else emulator)")
    d.add_argument("--model", action="store_true",
                   help="decode a tiny random MoE model through hipskinny (needs transformers)")
    args = parser.parse_args(argv)
    if args.command == "probe":
        return _probe(args.json)
    return _demo(args.device, args.model)


def _probe(as_json: bool) -> int:
    from .capability import format_report, probe

    report = probe()
    print(json.dumps(report, indent=2, sort_keys=True) if as_json else format_report(report))
    return 0 if report["ok"] else 1


def _demo(spec: str | None, model: bool = False) -> int:
    from .demo import run_demo, run_model_demo

    return run_model_demo(spec) if model else run_demo(spec)


if __name__ == "__main__":
    sys.exit(main())
