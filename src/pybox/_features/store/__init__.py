"""pybox's store: one SQLite database of runs, sandboxes, their state transitions and
an append-only, hash-chained audit log (docs/store.md).

The names are imported on first use: importing this package costs nothing, and
only `Store` (in `database`) imports sqlite3, so `import pybox` and a command that
never opens the store do not pay for it (tests/unit/test_cli_entry.py).
"""

from __future__ import annotations

from pybox._core.lazy import lazy_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pybox._features.store.chain import GENESIS_HASH, check_chain, entry_hash
    from pybox._features.store.database import DB_NAME, Store, open_store
    from pybox._features.store.redact import redact_details, redact_request
    from pybox._features.store.rows import (
        SANDBOX_STATES,
        AuditEntry,
        AuditVerdict,
        RunRow,
        RunsVerdict,
        SandboxRow,
        Transition,
        TransitionRefused,
    )
    from pybox._features.store.schema import SCHEMA_VERSION

_LAZY = {
    **dict.fromkeys(("GENESIS_HASH", "check_chain", "entry_hash"), ".chain"),
    **dict.fromkeys(("DB_NAME", "Store", "open_store"), ".database"),
    **dict.fromkeys(("redact_details", "redact_request"), ".redact"),
    **dict.fromkeys(
        (
            "SANDBOX_STATES",
            "AuditEntry",
            "AuditVerdict",
            "RunRow",
            "RunsVerdict",
            "SandboxRow",
            "Transition",
            "TransitionRefused",
        ),
        ".rows",
    ),
    "SCHEMA_VERSION": ".schema",
}
__all__ = [
    "DB_NAME",
    "GENESIS_HASH",
    "SANDBOX_STATES",
    "SCHEMA_VERSION",
    "AuditEntry",
    "AuditVerdict",
    "RunRow",
    "RunsVerdict",
    "SandboxRow",
    "Store",
    "Transition",
    "TransitionRefused",
    "check_chain",
    "entry_hash",
    "open_store",
    "redact_details",
    "redact_request",
]
__getattr__, __dir__ = lazy_names(globals(), _LAZY)
