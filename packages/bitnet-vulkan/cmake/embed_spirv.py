"""Write bitnet_vulkan/_spirv.py: the compiled SPIR-V modules as bytes (run by CMake)."""

import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    out, inputs = Path(argv[0]), argv[1:]
    lines = ['"""SPIR-V modules compiled from shaders/*.comp at build time (generated)."""', ""]
    if inputs == ["--skipped"]:
        lines += ["SKIPPED = True", "MODULES: dict[str, bytes] = {}"]
    else:
        lines += ["SKIPPED = False", "MODULES: dict[str, bytes] = {"]
        for path in map(Path, inputs):
            lines.append(f"    {path.stem!r}: {path.read_bytes()!r},")
        lines.append("}")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
