"""pybox: run code nobody has reviewed in a fresh, sealed box, with a receipt.

>>> from pybox import run_container
>>> result = run_container("print(6*7)", timeout_s=5)
>>> result.stdout, result.status
('42\\n', 'succeeded')
"""

from __future__ import annotations

from pybox._core.errors import (
    CleanupError,
    ConfigError,
    EngineError,
    EngineUnavailable,
    ImageError,
    InvalidRequest,
    LimitExceeded,
    PyboxError,
    RequestRejected,
    SandboxError,
)
from pybox._core.receipt import RECEIPT_VERSION, Receipt, Status
from pybox._core.request import InputFile
from pybox._frontends.api import Client, OutputFile, RunResult, run_container
from pybox._version import __version__

__all__ = [
    "RECEIPT_VERSION",
    "CleanupError",
    "Client",
    "ConfigError",
    "EngineError",
    "EngineUnavailable",
    "ImageError",
    "InputFile",
    "InvalidRequest",
    "LimitExceeded",
    "OutputFile",
    "PyboxError",
    "Receipt",
    "RequestRejected",
    "RunResult",
    "SandboxError",
    "Status",
    "__version__",
    "run_container",
]
