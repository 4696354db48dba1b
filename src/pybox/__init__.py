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
from pybox._core.lazy import lazy_names
from pybox._version import __version__

# The rest of the public API is imported on first use (PEP 562): `import pybox`,
# and with it every `pybox` command, does not pay for the orchestration. Not
# `typing.TYPE_CHECKING`: importing typing costs the command line too; type
# checkers treat any constant of that name alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
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
    from pybox._frontends.api import Client, OutputFile, RunResult, repair, run_container

# Public name -> the module that defines it.
_LAZY = {
    "RECEIPT_VERSION": "pybox._core.receipt",
    "Receipt": "pybox._core.receipt",
    "Status": "pybox._core.receipt",
    "REPAIR_VERSION": "pybox._core.repair",
    "RepairBudget": "pybox._core.repair",
    "RepairGoal": "pybox._core.repair",
    "RepairModel": "pybox._core.repair",
    "RepairReport": "pybox._core.repair",
    "RepairRound": "pybox._core.repair",
    "RepairRun": "pybox._core.repair",
    "StopReason": "pybox._core.repair",
    "InputFile": "pybox._core.request",
    "Client": "pybox._frontends.api",
    "OutputFile": "pybox._frontends.api",
    "RunResult": "pybox._frontends.api",
    "repair": "pybox._frontends.api",
    "run_container": "pybox._frontends.api",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    "RECEIPT_VERSION",
    "REPAIR_VERSION",
    "CleanupError",
    "Client",
    "ConfigError",
    "EngineError",
    "EngineUnavailable",
    "ImageError",
    "InputFile",
    "InvalidRequest",
    "LimitExceeded",
    "ModelError",
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
    "RunResult",
    "SandboxError",
    "Status",
    "StopReason",
    "__version__",
    "repair",
    "run_container",
]
