"""tools/new-backend: renaming, refusing to overwrite, and (lane ``template``) a real build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_backend_skeleton import skeleton_problems
from test_imports import surface_violations

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "new-backend"
META = ROOT / "packages" / "bitnet" / "pyproject.toml"


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60
    )


def shell_in(cwd: Path):
    """``sh(*cmd, cwd=cwd)``: run a command outside this venv (``uv`` makes its own), its
    stdout, or fail the test with its output's tail."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }

    def sh(*cmd: str, cwd: Path = cwd) -> str:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (
            f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
        return proc.stdout

    return sh


def test_rename_keeps_keyword_and_origin(new_backend):
    text = (
        'template <typename T>\nname = "template"\nclass TemplateProvider: ...\n'
        "import bitnet_template\nbitnet-template from templates/bitnet-backend-template\n"
        "BITNET_TEMPLATE_X templated"
    )
    out = new_backend.rename_text(text, "level-zero")
    assert out == (
        'template <typename T>\nname = "level-zero"\nclass LevelZeroProvider: ...\n'
        "import bitnet_level_zero\nbitnet-level-zero from templates/bitnet-backend-template\n"
        "BITNET_LEVEL_ZERO_X templated"
    )


def test_generates_a_renamed_package(tmp_path):
    dest = tmp_path / "bitnet-metal"
    result = run_tool("metal", "--dest", str(dest))
    assert result.returncode == 0, result.stderr
    assert (dest / "src" / "bitnet_metal" / "provider.py").is_file()
    pyproject = (dest / "pyproject.toml").read_text()
    assert 'name = "bitnet-metal"' in pyproject
    assert 'metal = "bitnet_metal.provider:MetalProvider"' in pyproject
    provider = (dest / "src" / "bitnet_metal" / "provider.py").read_text()
    assert 'name = "metal"' in provider and "class MetalProvider(" in provider
    assert 'conformance.suite("metal")' in (dest / "tests" / "test_conformance.py").read_text()
    leftovers = [
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file()
        and ("bitnet_template" in p.read_text() or "TemplateProvider" in p.read_text())
    ]
    assert not leftovers
    assert not any("build" in p.parts for p in dest.rglob("*"))


def test_generates_a_gpu_backend(tmp_path):
    """``--gpu``: a provider on GpuProvider, a kernels/ package, a fused runner on sdk.fused."""
    dest = tmp_path / "bitnet-metal"
    result = run_tool("metal", "--gpu", "--dest", str(dest))
    assert result.returncode == 0, result.stderr
    src = dest / "src" / "bitnet_metal"
    assert "class MetalProvider(" in (src / "provider.py").read_text()
    assert "    GpuProvider,\n" in (src / "provider.py").read_text()
    assert (src / "kernels" / "__init__.py").is_file() and not (src / "kernels.py").exists()
    runner = (src / "runner.py").read_text()
    assert (
        "from bitnet_core.sdk.fused import" in runner
        and "class MetalRunner(GenericRunner)" in runner
    )
    assert (dest / "tests" / "test_runner.py").is_file()
    assert skeleton_problems(dest) == []
    assert surface_violations(dest / "src") == []
    left = ("bitnet_template", "TemplateProvider", "TemplateRunner", "TemplateWeight")
    assert not [p for p in dest.rglob("*") if p.is_file() and any(w in p.read_text() for w in left)]


def test_meta_extras_are_made_from_the_packages(new_backend):
    """The umbrella extras ``gpu`` and ``all`` list what packages/* holds (``--register``
    writes them so): every GPU backend, every backend and the server."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(META.read_text())["project"]["optional-dependencies"]
    made = new_backend.meta_extras(ROOT, META.read_text())
    assert {k: extras[k] for k in made} == made
    assert set(new_backend.backends(ROOT)) >= {"cuda", "opencl", "vulkan", "webgpu"}
    assert all(new_backend.backends(ROOT)[n][1] for n in ("cuda", "opencl", "vulkan", "webgpu"))


def test_refuses_to_overwrite(tmp_path):
    dest = tmp_path / "bitnet-metal"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    result = run_tool("metal", "--dest", str(dest))
    assert result.returncode == 2
    assert "already exists" in result.stderr
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]
    assert (dest / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("bad", ["Metal", "9gpu", "my_gpu", "a--b", "template", "core", ""])
def test_rejects_bad_names(tmp_path, bad):
    result = run_tool(bad, "--dest", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "error:" in result.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.template
def test_template_builds_installs_and_passes_the_kit(tmp_path):
    """The template lane: generate, build the wheel, install it with bitnet-core, run the kit."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    dest = tmp_path / "bitnet-tmplcheck"
    assert run_tool("tmplcheck", "--dest", str(dest)).returncode == 0
    sh = shell_in(tmp_path)

    sh(uv, "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(dest))
    (wheel,) = (tmp_path / "dist").glob("bitnet_tmplcheck-*.whl")
    venv = tmp_path / "venv"
    sh(uv, "venv", "-q", "-p", sys.executable, str(venv))
    py = str(venv / "bin" / "python")
    sh(
        uv,
        "pip",
        "install",
        "-q",
        "--python",
        py,
        str(wheel),
        str(ROOT / "packages" / "bitnet-core"),
        "pytest",
    )
    out = sh(py, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", cwd=dest)
    assert " passed" in out and "failed" not in out
    # the kit outside pytest, and the provider listed by the CLI of the installed core
    out = sh(py, "-m", "bitnet_core.testing", "tmplcheck", "--no-large")
    assert "0 failed" in out
    assert "tmplcheck" in sh(str(venv / "bin" / "bitnet"), "devices")


def test_register_adds_the_package_to_the_workspace(new_backend, tmp_path):
    (tmp_path / "packages" / "bitnet").mkdir(parents=True)
    for rel in ("pyproject.toml", "packages/bitnet/pyproject.toml"):
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    for pkg in ("bitnet-cuda", "bitnet-opencl"):  # two of the backends there, with their providers
        for rel in ("pyproject.toml", f"src/{pkg.replace('-', '_')}/provider.py"):
            (tmp_path / "packages" / pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "packages" / pkg / rel).write_text(
                (ROOT / "packages" / pkg / rel).read_text()
            )
    new_backend.generate("metal", tmp_path / "packages" / "bitnet-metal")
    new_backend.generate("gpux", tmp_path / "packages" / "bitnet-gpux", gpu=True)
    new_backend.register(tmp_path, "metal")
    new_backend.register(tmp_path, "metal")  # idempotent
    new_backend.register(tmp_path, "gpux")
    tomllib = pytest.importorskip("tomllib")

    root = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert root["project"]["dependencies"].count("bitnet-metal") == 1
    assert root["tool"]["uv"]["sources"]["bitnet-metal"] == {"workspace": True}
    meta = tomllib.loads((tmp_path / "packages/bitnet/pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    assert extras["metal"] == ["bitnet-metal"] and extras["gpux"] == ["bitnet-gpux"]
    # the umbrellas made from what packages/ holds: a CPU backend is not in `gpu`
    assert extras["gpu"] == ["bitnet-cuda[cuda12]", "bitnet-gpux", "bitnet-opencl"]
    assert extras["all"] == [
        "bitnet-cuda[cuda12]", "bitnet-gpux", "bitnet-metal", "bitnet-opencl", "bitnet-core[server]"
    ]  # fmt: skip
    # everything that was there is still there
    before = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(before["project"]["dependencies"]) < set(root["project"]["dependencies"])
    assert set(before["tool"]["uv"]["sources"]) < set(root["tool"]["uv"]["sources"])


@pytest.mark.template
def test_gpu_backend_builds_installs_through_all_and_passes_the_kit(tmp_path):
    """The template lane: ``new-backend --gpu --register`` in a copy of the repository whose
    only backend it is, its wheel (and the meta package's) from the unmodified
    tools/build-wheels, installed through ``bitnet[all]`` into a fresh venv, the kit run."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    tomllib = pytest.importorskip("tomllib")
    repo = tmp_path / "repo"
    skip = shutil.ignore_patterns("build", "dist", "__pycache__", "*.so", ".pytest_cache")
    version = "packages/bitnet-core/src/bitnet_core/_version.py"  # (new-backend's version)
    for rel in ("tools/new-backend", "tools/build-wheels", "pyproject.toml", version):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    shutil.copytree(ROOT / "templates", repo / "templates", ignore=skip)
    shutil.copytree(ROOT / "packages" / "bitnet", repo / "packages" / "bitnet", ignore=skip)
    sh = shell_in(tmp_path)

    sh(sys.executable, str(repo / "tools" / "new-backend"), "gpucheck", "--gpu", "--register")
    shutil.rmtree(repo / "packages" / "bitnet-core")  # (not a workspace member without the rest)
    extras = tomllib.loads((repo / "packages/bitnet/pyproject.toml").read_text())
    extras = extras["project"]["optional-dependencies"]
    assert extras["gpu"] == ["bitnet-gpucheck"]
    assert extras["all"] == ["bitnet-gpucheck", "bitnet-core[server]"]
    dist = tmp_path / "dist"
    sh(
        sys.executable,
        str(repo / "tools" / "build-wheels"),
        "--out", str(dist), "--python", sys.executable, "--skip-sdist",
    )  # fmt: skip
    (meta,) = dist.glob("bitnet-*.whl")
    (wheel,) = dist.glob("bitnet_gpucheck-*manylinux*.whl")  # C++ inside: repaired
    venv = tmp_path / "venv"
    sh(uv, "venv", "-q", "-p", sys.executable, str(venv))
    py = str(venv / "bin" / "python")
    core = ROOT / "packages" / "bitnet-core"
    sh(
        uv, "pip", "install", "-q", "--python", py, "--find-links", str(dist),
        f"bitnet[all] @ {meta.as_uri()}", str(core), "pytest",
    )  # fmt: skip
    listed = sh(uv, "pip", "list", "--python", py)
    assert "bitnet-gpucheck" in listed and "fastapi" in listed  # the backend and the server
    dest = repo / "packages" / "bitnet-gpucheck"
    out = sh(py, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", cwd=dest)
    assert " passed" in out and "failed" not in out
    out = sh(py, "-m", "bitnet_core.testing", "gpucheck", "--no-large")
    assert "0 failed" in out
