"""The error hierarchy of bitnet.

Every failure a user can cause (a bad file, an unknown device, a malformed
request) raises one of these, never a bare ``ValueError`` or a traceback from a
dependency. The CLI prints ``error: <message>`` and exits with ``exit_code``.
"""

from __future__ import annotations

#: Exit code the CLI uses for validation failures in strict mode (seed 003).
STRICT_VALIDATION_EXIT_CODE = 8


class BitnetError(Exception):
    """Base of every error bitnet raises on purpose."""

    exit_code: int = 1


# --- devices and providers -------------------------------------------------


class DeviceError(BitnetError):
    """Something about devices or kernel providers went wrong."""

    exit_code = 2


class UnknownDeviceError(DeviceError):
    """The requested device name is not one bitnet knows."""


class DeviceUnavailableError(DeviceError):
    """The requested device exists as a name but cannot be used here (the message says why)."""


class ProviderError(DeviceError):
    """A kernel provider failed while running (a device error, a failed launch)."""


class UnsupportedOperationError(ProviderError):
    """A provider was asked for an op, dtype or shape it does not implement."""


class StrictModeError(BitnetError):
    """BITNET_STRICT_MODE=1 turned a fallback, a fake device or a suspicious result into an error."""

    exit_code = STRICT_VALIDATION_EXIT_CODE


class ValidationError(BitnetError):
    """A model, receipt or output failed validation."""

    exit_code = STRICT_VALIDATION_EXIT_CODE


# --- model files -------------------------------------------------------------


class ModelFileError(BitnetError):
    """A model file cannot be read: missing, truncated, corrupt or hostile."""

    exit_code = 3

    def __init__(self, message: str, path: object | None = None) -> None:
        self.path = None if path is None else str(path)
        super().__init__(f"{self.path}: {message}" if self.path else message)


class HubError(ModelFileError):
    """A model named on the Hugging Face Hub cannot be found, fetched, or read from the cache."""


class GGUFFormatError(ModelFileError):
    """The GGUF container itself is malformed (magic, counts, offsets, sizes)."""


class UnsupportedModelError(ModelFileError):
    """The file is valid but describes something bitnet does not run (architecture, tensor type)."""


class QuantizationError(BitnetError):
    """Packing or unpacking a weight format failed (bad shape, bad code, bad size)."""


class TokenizerError(BitnetError):
    """The tokenizer could not be built from the file or could not encode/decode."""


# --- running ---------------------------------------------------------------


class ShapeError(BitnetError):
    """Arrays given to an op or a model do not have the shapes it needs."""


class ContextLengthError(BitnetError):
    """A sequence would exceed the context length or the KV cache's limit."""


class ConfigError(BitnetError):
    """A setting (flag, environment variable, sampling value) is out of range or malformed."""


class RequestError(BitnetError):
    """A malformed request to the server or the API (wrong type, out-of-range value)."""

    exit_code = 4
