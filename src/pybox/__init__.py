"""pybox: run code nobody has reviewed in a fresh, sealed box, with a receipt.

>>> from pybox import run_container
>>> result = run_container("print(6*7)", timeout_s=5)
>>> result.stdout, result.status
('42\\n', 'succeeded')
"""

from __future__ import annotations

from pybox._core.errors import (
    Busy,
    CleanupError,
    ConfigError,
    EgressRefused,
    EngineAnswerTooLarge,
    EngineAPIError,
    EngineCannotApply,
    EngineError,
    EngineUnavailable,
    EnvRefused,
    IllegalTransition,
    ImageBuildError,
    ImageError,
    InvalidRequest,
    LibraryInstallError,
    LimitExceeded,
    ModelError,
    ModelRateLimited,
    ModelReplyTooLarge,
    ModelTimeout,
    PlatformError,
    PostureMismatch,
    ProjectRefused,
    ProjectTooBig,
    PyboxError,
    RequestRejected,
    RuntimeNotAllowed,
    RuntimeUnavailable,
    SandboxBusy,
    SandboxError,
    SandboxNotFound,
    StateError,
    VMIsolationError,
    WaitCancelled,
)
from pybox._core.lazy import lazy_names
from pybox._version import __version__

# The rest of the public API is imported on first use (PEP 562): `import pybox`,
# and with it every `pybox` command, does not pay for the orchestration. Not
# `typing.TYPE_CHECKING`: importing typing costs the command line too; type
# checkers treat any constant of that name alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
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
        Experiment,
        Job,
        OutputFile,
        RunResult,
        RunStream,
        Sandbox,
        SandboxFile,
        SandboxInfo,
        repair,
        run_container,
        stream_container,
    )

# Public name -> the module that defines it.
_LAZY = {
    **dict.fromkeys(
        ("FileReturned", "OutputChunk", "RunEnded", "RunEvent", "RunStarted"), "pybox._core.events"
    ),
    **dict.fromkeys(("RECEIPT_VERSION", "Receipt", "Status"), "pybox._core.receipt"),
    **dict.fromkeys(
        (
            "REPAIR_VERSION",
            "RepairBudget",
            "RepairGoal",
            "RepairModel",
            "RepairReport",
            "RepairRound",
            "RepairRun",
            "StopReason",
        ),
        "pybox._core.repair",
    ),
    "InputFile": "pybox._core.request",
    **dict.fromkeys(
        (
            "Client",
            "Experiment",
            "Job",
            "OutputFile",
            "RunResult",
            "RunStream",
            "Sandbox",
            "SandboxFile",
            "SandboxInfo",
            "repair",
            "run_container",
            "stream_container",
        ),
        "pybox._frontends.api",
    ),
}

__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "RECEIPT_VERSION",
    "REPAIR_VERSION",
    "Busy",
    "CleanupError",
    "Client",
    "ConfigError",
    "EgressRefused",
    "EngineAPIError",
    "EngineAnswerTooLarge",
    "EngineCannotApply",
    "EngineError",
    "EngineUnavailable",
    "EnvRefused",
    "Experiment",
    "FileReturned",
    "IllegalTransition",
    "ImageBuildError",
    "ImageError",
    "InputFile",
    "InvalidRequest",
    "Job",
    "LibraryInstallError",
    "LimitExceeded",
    "ModelError",
    "ModelRateLimited",
    "ModelReplyTooLarge",
    "ModelTimeout",
    "OutputChunk",
    "OutputFile",
    "PlatformError",
    "PostureMismatch",
    "ProjectRefused",
    "ProjectTooBig",
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
    "RuntimeNotAllowed",
    "RuntimeUnavailable",
    "Sandbox",
    "SandboxBusy",
    "SandboxError",
    "SandboxFile",
    "SandboxInfo",
    "SandboxNotFound",
    "StateError",
    "Status",
    "StopReason",
    "VMIsolationError",
    "WaitCancelled",
    "__version__",
    "repair",
    "run_container",
    "stream_container",
]
