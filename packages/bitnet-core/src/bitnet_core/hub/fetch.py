"""Fetch a hub model into huggingface_hub's cache and return the local GGUF path.

Uses huggingface_hub for everything on the wire and on disk: its cache
(``HF_HOME``/``HF_HUB_CACHE``), resumable downloads with a progress bar,
revisions, ``HF_TOKEN``, ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` (the three
environment variables are read at each call). A repo with GGUF files gives
the preferred one (:func:`choose_gguf`); a checkpoint repo without any is
downloaded and converted on first use to
``<cache>/models--ORG--NAME/bitnet-converted/<commit>/model-<type>.gguf``,
beside huggingface_hub's own folders, so deleting the repo from the cache
deletes the conversion too.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import BitnetError, HubError
from .names import HubRef, choose_gguf

#: What a checkpoint repo download fetches (weights, config, tokenizer files).
CHECKPOINT_PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt"]
_TRUE = {"1", "on", "yes", "true"}


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.constants
        import huggingface_hub.errors
        import huggingface_hub.file_download
        import huggingface_hub.utils
    except ImportError as exc:  # pragma: no cover - a dependency of tokenizers
        raise HubError("models by name need huggingface_hub (pip install huggingface_hub)") from exc
    return huggingface_hub


def _offline() -> bool:
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.strip().lower() in _TRUE or bool(_hub().constants.HF_HUB_OFFLINE)


def _endpoint() -> str | None:
    return (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None


def _cache_dir() -> Path:
    """huggingface_hub's cache folder, from the environment as it is now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    return Path(_hub().constants.HF_HUB_CACHE)


@contextlib.contextmanager
def _hub_errors(ref: HubRef) -> Iterator[None]:
    """huggingface_hub's and the network's exceptions as one :class:`HubError` line."""
    hf = _hub()
    e = hf.errors
    try:
        yield
    except BitnetError:
        raise
    except e.GatedRepoError as exc:
        raise HubError(
            f"{ref.repo_id}: the repository is gated; accept its terms and set HF_TOKEN"
        ) from exc
    except e.RepositoryNotFoundError as exc:
        raise HubError(
            f"{ref.repo_id}: no such repository on the hub (or it is private: set HF_TOKEN), "
            "and no local file of that name"
        ) from exc
    except e.RevisionNotFoundError as exc:
        raise HubError(f"{ref.repo_id}: no revision {ref.revision!r}") from exc
    except e.LocalEntryNotFoundError as exc:
        raise HubError(
            f"{ref}: not in the local cache ({_cache_dir()}) and the hub cannot be reached"
            + (" (HF_HUB_OFFLINE is set)" if _offline() else "")
        ) from exc
    except e.EntryNotFoundError as exc:
        raise HubError(f"{ref.repo_id}: no file {ref.filename!r} in the repository") from exc
    except e.HfHubHTTPError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HubError(f"{ref}: the hub answered: {first}") from exc
    except (OSError, ValueError) as exc:  # connection refused, DNS, timeouts, bad endpoint URL
        raise HubError(
            f"{ref}: cannot reach the hub at {_endpoint() or 'huggingface.co'}: {exc}"
        ) from exc
    except Exception as exc:  # httpx's errors are not OSErrors
        if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
            raise HubError(
                f"{ref}: cannot reach the hub at {_endpoint() or 'huggingface.co'}: {exc}"
            ) from exc
        raise


@contextlib.contextmanager
def _progress_bars(enabled: bool | None) -> Iterator[None]:
    hf = _hub()
    if enabled is None:
        enabled = sys.stderr.isatty()
    was_disabled = hf.utils.are_progress_bars_disabled()
    if not enabled:
        hf.utils.disable_progress_bars()
    try:
        yield
    finally:
        if not enabled and not was_disabled:
            hf.utils.enable_progress_bars()


def _listing(ref: HubRef) -> tuple[str, list[str], Path | None]:
    """``(commit, files, cached snapshot folder or None)`` of ``ref``: from the hub, else the cache."""
    hf = _hub()
    if not _offline():
        try:
            info = hf.HfApi(endpoint=_endpoint()).model_info(ref.repo_id, revision=ref.revision)
            files = [s.rfilename for s in (info.siblings or [])]
            if info.sha:
                return info.sha, files, None
        except (hf.errors.RepositoryNotFoundError, hf.errors.RevisionNotFoundError):
            raise
        except hf.errors.HfHubHTTPError as exc:
            if exc.response is not None and exc.response.status_code < 500:
                raise
        except Exception as exc:  # unreachable hub: fall back to the cache below
            if not _is_connection_error(exc):
                raise
    folder = Path(
        hf.snapshot_download(
            ref.repo_id,
            revision=ref.revision,
            cache_dir=_cache_dir(),
            local_files_only=True,
        )
    )
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return folder.name, files, folder


def _is_connection_error(exc: Exception) -> bool:
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")


def _download(ref: HubRef, filename: str, snapshot: Path | None) -> Path:
    if snapshot is not None:  # offline: the cached snapshot is all there is
        path = snapshot / filename
        if not path.is_file():
            raise HubError(f"{ref.repo_id}: {filename} is not in the local cache ({_cache_dir()})")
        return path
    return Path(
        _hub().hf_hub_download(
            ref.repo_id,
            filename,
            revision=ref.revision,
            cache_dir=_cache_dir(),
            endpoint=_endpoint(),
        )
    )


def converted_path(repo_id: str, commit: str, ternary_type: str) -> Path:
    """Where the conversion of ``repo_id`` at ``commit`` lives in the cache."""
    folder = _hub().file_download.repo_folder_name(repo_id=repo_id, repo_type="model")
    return _cache_dir() / folder / "bitnet-converted" / commit / f"model-{ternary_type}.gguf"


def _convert(
    ref: HubRef,
    commit: str,
    files: list[str],
    snapshot: Path | None,
    ternary_type: str,
    say: Callable[[str], None],
    progress: bool | None,
) -> Path:
    out = converted_path(ref.repo_id, commit, ternary_type)
    if out.is_file():
        return out
    if "config.json" not in files or not any(f.endswith(".safetensors") for f in files):
        shown = ", ".join(files[:8]) + (" ..." if len(files) > 8 else "")
        raise HubError(
            f"{ref}: no GGUF file and no safetensors checkpoint (config.json + *.safetensors) "
            f"in the repository (files: {shown or 'none'})"
        )
    if snapshot is None:
        snapshot = Path(
            _hub().snapshot_download(  # by the name asked for, so the cache records the ref
                ref.repo_id,
                revision=ref.revision,
                cache_dir=_cache_dir(),
                endpoint=_endpoint(),
                allow_patterns=CHECKPOINT_PATTERNS,
            )
        )
    say(
        f"bitnet: {ref.repo_id} has no GGUF file; converting its checkpoint to "
        f"{ternary_type} (once) into {out}"
    )
    from ..convert import convert_checkpoint

    convert_checkpoint(
        snapshot,
        out,
        ternary_type=ternary_type,
        overwrite=True,
        progress=progress,
        report=lambda line: say(f"bitnet: fallback: {line}"),
    )
    return out


def fetch_model(
    ref: HubRef,
    *,
    ternary_type: str = "tq2_0",
    progress: bool | None = None,
    say: Callable[[str], None] | None = None,
) -> Path:
    """The local GGUF file of hub model ``ref``: downloaded once, then from the cache.

    ``say`` gets one-line messages (which file was chosen among several, a
    conversion); default: printed on stderr.
    """
    if say is None:

        def say(line: str) -> None:
            print(line, file=sys.stderr)

    with _hub_errors(ref), _progress_bars(progress):
        commit, files, snapshot = _listing(ref)
        if ref.filename is not None:
            if ref.filename not in files:
                where = "in the local cache" if snapshot is not None else "in the repository"
                raise HubError(f"{ref.repo_id}: no file {ref.filename!r} {where}")
            if not ref.filename.lower().endswith(".gguf"):
                raise HubError(f"{ref}: {ref.filename!r} is not a .gguf file")
            return _download(ref, ref.filename, snapshot)
        ggufs = choose_gguf(files)
        if ggufs:
            if len(ggufs) > 1:
                say(
                    f"bitnet: {ref.repo_id} has {len(ggufs)} GGUF files; using {ggufs[0]} "
                    f"(choose with {ref.repo_id}:FILE): {', '.join(ggufs)}"
                )
            return _download(ref, ggufs[0], snapshot)
        return _convert(ref, commit, files, snapshot, ternary_type, say, progress)
