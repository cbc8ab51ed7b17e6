"""``bitnet devices``: every provider, whether it runs here and why, and what auto selects."""

from __future__ import annotations

import argparse
import json
import sys

from ...errors import BitnetError
from ...hal import list_providers, select
from ...hal.placement import device_ops


def placement(provider: object) -> tuple[list[str], list[str]]:
    """(ops on the device, ops on the host) of a loaded provider."""
    if provider is None:
        return [], []
    return list(device_ops(provider)), list(getattr(provider, "host_ops", ()))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list kernel providers and the device selection")
    p.add_argument(
        "--device", default=None, help="request to resolve (default: BITNET_DEVICE or auto)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--verbose",
        dest="show_placement",
        action="store_true",
        help="also list which ops run on the device and which on the host",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    records = list_providers()
    selected, summary, error = None, None, None
    try:
        sel = select(args.device)
        selected, summary = sel.record.name, sel.summary
    except BitnetError as exc:
        error = exc
    if args.json:
        out = {
            "providers": [
                {
                    "name": r.name,
                    "family": r.family,
                    "device_kind": r.device_kind,
                    "priority": r.priority,
                    "available": r.availability.available,
                    "device": r.availability.device,
                    "reason": r.availability.reason,
                    "fake": r.availability.fake,
                    "origin": r.origin,
                    "device_ops": placement(r.provider)[0],
                    "host_ops": placement(r.provider)[1],
                }
                for r in records
            ],
            "selected": selected,
            "summary": summary.as_dict() if summary else None,
            "error": str(error) if error else None,
        }
        print(json.dumps(out, indent=2))
    else:
        rows = [("PROVIDER", "PRIO", "KIND", "STATUS", "DEVICE / REASON")]
        for r in records:
            a = r.availability
            status = "fake" if a.fake else ("ok" if a.available else "unavailable")
            mark = "*" if r.name == selected else " "
            rows.append(
                (mark + r.name, str(r.priority), r.device_kind, status, a.device or a.reason)
            )
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row, r in zip(rows, [None, *records], strict=True):
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4])
            if args.show_placement and r is not None and r.provider is not None:
                on_device, on_host = placement(r.provider)
                print(f"    on the device: {', '.join(on_device)}")
                print(f"    on the host:   {', '.join(on_host) or '(none)'}")
        if summary:
            print(f"\n{summary}")
    if error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    return 0
