"""Build-time check: compile every WGSL shader (every #ifdef variant) through wgpu/naga.

Run by CMakeLists.txt when the wheel is built, so an invalid shader fails the
build. It needs a WebGPU adapter (lavapipe counts). Without one it warns and
passes, unless BITNET_WEBGPU_REQUIRE_SHADER_CHECK=1 (CI sets it), where it fails.
Exit codes: 0 ok or skipped, 1 a shader failed, 2 required check impossible.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHADERS_PY = HERE.parent / "src" / "bitnet_webgpu" / "kernels" / "__init__.py"


def load_shaders_module():
    spec = importlib.util.spec_from_file_location("_bitnet_webgpu_shaders", SHADERS_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main() -> int:
    required = os.environ.get("BITNET_WEBGPU_REQUIRE_SHADER_CHECK") == "1"
    shaders = load_shaders_module()
    try:
        import wgpu

        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        if adapter is None:
            raise RuntimeError("no adapter")
        device = adapter.request_device_sync()
    except Exception as exc:
        msg = f"bitnet-webgpu shader check: no WebGPU adapter to compile with ({exc})"
        print(
            ("error: " if required else "warning: ") + msg + "; shaders NOT validated",
            file=sys.stderr,
        )
        return 2 if required else 0
    failed = 0
    for name in shaders.SHADER_NAMES:
        for defines in shaders.variants(name):
            code = shaders.preprocess(shaders.shader_source(name), defines)
            label = name + ("[" + ",".join(sorted(defines)) + "]" if defines else "")
            try:
                module = device.create_shader_module(code=code, label=label)
                device.create_compute_pipeline(
                    layout="auto", compute={"module": module, "entry_point": "main"}
                )
                print(f"shader ok: {label}")
            except Exception as exc:
                failed += 1
                print(f"error: shader {label} is invalid:\n{exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
