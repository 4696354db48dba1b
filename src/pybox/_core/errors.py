"""The one exception tree pybox raises.

Every message says what failed, the value involved, the limit (if any) and the
next step. A program that fails inside its box is *not* an exception: it is
data in the receipt.
"""

from __future__ import annotations

# Only an annotation here: every `pybox` command imports this module, and
# boxquote imports dataclasses (tests/unit/test_cli_startup.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pybox._core.boxquote import BoxQuote


class PyboxError(Exception):
    """Base class of every error pybox raises on purpose."""


class RequestRejected(PyboxError):
    """The request was refused before anything was created."""


class LimitExceeded(RequestRejected):
    """A requested limit is above the operator's ceiling (never clamped)."""


class InvalidRequest(RequestRejected):
    """A request is malformed: wrong type, bad file name, missing file."""


class RuntimeNotAllowed(RequestRejected):
    """A run asked for a runtime (isolation lane) the operator does not allow (never moved
    to another)."""


class SandboxNotFound(RequestRejected):
    """No sandbox of that id is known (or it was destroyed)."""


class SandboxBusy(RequestRejected):
    """Another operation holds the sandbox for longer than a caller waits."""


class ProjectRefused(RequestRejected):
    """A project path is not one pybox may copy (outside the allowed roots, a system
    or credential folder, the home folder itself)."""


class ProjectTooBig(RequestRejected):
    """A project holds more files or bytes than the operator allows to copy."""


class EnvRefused(RequestRejected):
    """An environment variable may not cross into an experiment's box."""


class EgressRefused(RequestRejected):
    """A box asked for more network than the operator's policy allows (never narrowed)."""


class Busy(RequestRejected):
    """Every box slot is taken and the queue is full, or a wait for a slot ran out.

    Nothing was started; the same request may succeed after `retry_after_s`."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float,
        running: int,
        max_running: int,
        waiting: int,
        max_waiting: int,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.running = running
        self.max_running = max_running
        self.waiting = waiting
        self.max_waiting = max_waiting


class WaitCancelled(PyboxError):
    """A run was stopped while it waited for a box slot; nothing was started."""


class ConfigError(PyboxError):
    """The operator configuration (file, environment, flags) is invalid."""


class EngineError(PyboxError):
    """The container engine failed or answered something unexpected."""


class EngineUnavailable(EngineError):
    """The container engine cannot be reached. Never read as "already gone"."""


class RuntimeUnavailable(EngineError):
    """The run's runtime (gVisor) is not registered with the engine."""


class EngineAPIError(EngineError):
    """The engine answered an API call with an error status."""

    def __init__(self, message: str, *, status: int, engine_message: str) -> None:
        super().__init__(message)
        self.status = status
        self.engine_message = engine_message


class EngineCannotApply(EngineAPIError):
    """The engine cannot apply a field of the box, so pybox refused the box (or its
    network) before asking for it: nothing was made. `field` names it."""

    field: str = ""


class EngineAnswerTooLarge(EngineError):
    """The engine's answer was longer than pybox allowed itself to read."""

    def __init__(self, message: str, *, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


class ImageError(PyboxError):
    """An image is missing, unrecorded, or not the one that was recorded."""


class ImageBuildError(ImageError):
    """Building an image failed."""


class StateError(PyboxError):
    """pybox's state directory cannot be read or written."""


class IllegalTransition(StateError):
    """A record was asked to move to a state its state machine does not allow.

    The record is left as it was; `current`, `requested` and `allowed` say why."""

    def __init__(
        self, message: str, *, current: str, requested: str, allowed: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        self.current = current
        self.requested = requested
        self.allowed = allowed


class SandboxError(PyboxError):
    """The box could not be made or kept as promised (posture, protocol).

    `quote` marks the part of the message that came from inside the box, if any."""

    def __init__(self, message: str, *, quote: BoxQuote | None = None) -> None:
        super().__init__(message)
        self.quote = quote


class LibraryInstallError(SandboxError):
    """Installing libraries in an install box failed (pip, its time, its size).

    `quote` marks pip's own words, which came from inside the install box."""


class PostureMismatch(SandboxError):
    """The container the engine created differs from what pybox asked for."""

    def __init__(self, message: str, *, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class PlatformError(PyboxError):
    """The host side is not ready: a tool is missing, untrusted or too old, or the
    VM pybox drives (on macOS) is stopped or not set up as promised."""


class VMIsolationError(PlatformError):
    """The VM has host folders mounted or ports forwarded: pybox refuses to use it."""


class CleanupError(PyboxError):
    """A box could not be confirmed removed."""


class ModelError(PyboxError):
    """A repair model could not be run or reached, or answered with an error."""


class ModelTimeout(ModelError):
    """A repair model did not answer within the time it was given."""


class ModelRateLimited(ModelError):
    """A repair model's service asked pybox to wait (HTTP 429)."""

    def __init__(self, message: str, *, retry_after_s: float | None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelReplyTooLarge(ModelError):
    """A repair model's reply was longer than the bytes it was allowed."""
