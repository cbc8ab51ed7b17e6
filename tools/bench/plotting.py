"""matplotlib's pyplot for the bench scripts' ``--png`` figures, where it is installed."""

from __future__ import annotations

import sys
from typing import Any


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None (said on stderr)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (uv sync --group bench)", file=sys.stderr)
        return None
    return plt
