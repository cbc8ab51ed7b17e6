"""What every atheris target under ``tools/fuzz`` shares: instrumentation, seeds, the run.

``instrument()`` adds atheris' coverage and comparison tracing to every
function already imported from ``bitnet_core`` and the target itself. It finds
them with ``gc`` (as ``atheris.instrument_all`` does, but only ours), so it
works however the package was installed: ``atheris.instrument_imports`` sees
nothing through the editable install's import hook.

``run(name, test_one_input)`` runs a target: the committed seeds
(``corpus/<name>/``) are read, new inputs go to a temporary directory (or the
first corpus directory given), ``<name>.dict`` is the libFuzzer dictionary when
there is one. Before instrumenting, each seed runs once, so modules a target
imports lazily are loaded and instrumented too.

``planted(name)`` is the bug a test plants: with ``BITNET_FUZZ_PLANT=1`` it
raises when a model file opens under a name no seed has: the fuzzer must keep
valid seeds in its corpus and mutate them, which it does only when it sees
coverage (an uninstrumented run keeps one input of one byte).
"""

from __future__ import annotations

import contextlib
import gc
import operator
import os
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path

import atheris
from atheris.version_dependent import CMP_OP_SHIFT_AMOUNT

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
SEED_NAME = "fuzz-seed-model:" + "x" * 240  # every model seed's general.name (long: often mutated)


class PlantedBug(RuntimeError):
    """The bug ``BITNET_FUZZ_PLANT=1`` plants (never raised otherwise)."""


def planted(value: object) -> None:
    """Raise ``PlantedBug`` if the plant is on and ``value`` is a model name no seed has.

    The seeds all open as models named ``SEED_NAME``; a mutated name needs a
    valid file kept and mutated, which an uninstrumented run (its corpus one
    input of one byte) never does.
    """
    if _PLANT_ON and isinstance(value, str) and value != SEED_NAME:
        raise PlantedBug(f"the planted bug was reached with the model name {value!r}")


_PLANT_ON = os.environ.get("BITNET_FUZZ_PLANT") == "1"


_native_trace_cmp = atheris._trace_cmp
_COMPARE = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)
_TRACED_TYPES = frozenset({int, bool, float, str, bytes, type(None)})


def _trace_cmp(a: object, b: object, op: int, counter: int, is_const: bool) -> object:
    """atheris' comparison hook, for the types libFuzzer can use only.

    atheris 3.0's native hook leaks a reference on other objects: each
    ``(codes == 3).any()`` of a numpy array kept the array alive (RSS grew
    by the array's size per comparison; 69 -> 391 MB in 5 minutes of the
    GGUF target). Other comparisons are made here, untraced.
    """
    if type(a) in _TRACED_TYPES and type(b) in _TRACED_TYPES:
        return _native_trace_cmp(a, b, op, counter, is_const)
    # with a constant first, atheris passes the reversed op unshifted (Python 3.12+)
    return _COMPARE[op if op < len(_COMPARE) else op >> CMP_OP_SHIFT_AMOUNT](a, b)


def _hook_comparisons() -> None:
    """Put ``_trace_cmp`` in atheris' place (instrumented code looks it up on the
    module at each call; ``atheris.Fuzz`` installs libFuzzer's own when it starts)."""
    global _native_trace_cmp
    if atheris._trace_cmp is not _trace_cmp:
        _native_trace_cmp = atheris._trace_cmp
        atheris._trace_cmp = _trace_cmp


def instrument(prefixes: tuple[str, ...] = ("bitnet_core",)) -> int:
    """Instrument every loaded function of the modules under ``prefixes`` (and ``__main__``,
    this module); return how many were instrumented."""
    roots = {*prefixes, "__main__", __name__}
    n = 0
    for obj in gc.get_objects():
        if not isinstance(obj, types.FunctionType):
            continue
        module = getattr(obj, "__module__", None) or ""
        if module in roots or module.split(".")[0] in roots:
            try:
                atheris.instrument_func(obj)
            except Exception as exc:  # noqa: BLE001 - report and go on, as instrument_all does
                print(f"fuzz: cannot instrument {obj}: {exc}", file=sys.stderr)
                continue
            n += 1
    return n


def seed_files(name: str) -> list[Path]:
    d = CORPUS / name
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def run(
    name: str,
    test_one_input: Callable[[bytes], None],
    prefixes: tuple[str, ...] = ("bitnet_core",),
) -> None:
    """Warm up on the seeds, instrument, and hand over to libFuzzer (``sys.argv`` options)."""
    for seed in seed_files(name):
        with contextlib.suppress(PlantedBug):
            test_one_input(seed.read_bytes())
    count = instrument(prefixes)
    print(f"fuzz: {name}: instrumented {count} functions", file=sys.stderr)
    argv = list(sys.argv)
    paths = [a for a in argv[1:] if not a.startswith("-")]
    if not any(os.path.isfile(p) for p in paths):  # fuzzing, not re-running given inputs
        if not paths:
            argv.append(tempfile.mkdtemp(prefix=f"bitnet-fuzz-{name}-"))
        seeds = CORPUS / name
        if seeds.is_dir() and all(Path(p).resolve() != seeds.resolve() for p in paths):
            argv.append(str(seeds))
    dictionary = HERE / f"{name}.dict"
    if dictionary.is_file() and not any(a.startswith("-dict=") for a in argv[1:]):
        argv.insert(1, f"-dict={dictionary}")

    def one_input(data: bytes) -> None:
        _hook_comparisons()
        test_one_input(data)

    atheris.Setup(argv, one_input)
    atheris.Fuzz()
