"""``python -m bitnet_core.testing NAME``: run the conformance kit outside pytest.

Prints one line per failure and a summary; ``--json PATH`` writes the full
report (the GPU smoke lane keeps it as a receipt). Exit code 0 when every
case passed, 1 on a failure, 2 when the provider is unavailable here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from ..atomic_file import ordinary_mode
from .conformance import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bitnet_core.testing", description=__doc__)
    ap.add_argument("provider", help="registered provider name or device family")
    ap.add_argument("--json", metavar="PATH", help="write the report as JSON")
    ap.add_argument("--no-large", action="store_true", help="skip the real-model-size cases")
    ap.add_argument("--only", nargs="*", help="ops or case ids to run")
    args = ap.parse_args(argv)
    report = run(args.provider, large=not args.no_large, only=args.only)
    for r in report.failed:
        print(f"FAIL {r.id}: {r.message}")
    counts = report.counts()
    print(
        f"conformance {report.provider} on {report.device or '-'}: "
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    )
    if args.json:
        directory = os.path.dirname(os.path.abspath(args.json))
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as f:
            json.dump(report.as_dict(), f, indent=1)
        ordinary_mode(f.name)
        os.replace(f.name, args.json)
    if report.failed:
        return 1
    return 0 if report.passed else 2


if __name__ == "__main__":
    sys.exit(main())
