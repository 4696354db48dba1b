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
    ModelError,
    PyboxError,
    RequestRejected,
    SandboxError,
)
from pybox._core.events import FileReturned, OutputChunk, RunEnded, RunEvent, RunStarted
from pybox._core.receipt import RECEIPT_VERSION, Receipt, Status
from pybox._core.repair import (
    REPAIR_VERSION,
    RepairBudget,
    RepairGoal,
    RepairModel,
    RepairReport,
    RepairRound,
    RepairRun,
    StopReason,
)
from pybox._core.request import InputFile
from pybox._frontends.api import (
    Client,
    OutputFile,
    RunResult,
    RunStream,
    repair,
    run_container,
    stream_container,
)
from pybox._version import __version__

__all__ = [
    "RECEIPT_VERSION",
    "REPAIR_VERSION",
    "CleanupError",
    "Client",
    "ConfigError",
    "EngineError",
    "EngineUnavailable",
    "FileReturned",
    "ImageError",
    "InputFile",
    "InvalidRequest",
    "LimitExceeded",
    "ModelError",
    "OutputChunk",
    "OutputFile",
    "PyboxError",
    "Receipt",
    "RepairBudget",
    "RepairGoal",
    "RepairModel",
    "RepairReport",
    "RepairRound",
    "RepairRun",
    "RequestRejected",
    "RunEnded",
    "RunEvent",
    "RunResult",
    "RunStarted",
    "RunStream",
    "SandboxError",
    "Status",
    "StopReason",
    "__version__",
    "repair",
    "run_container",
    "stream_container",
]
