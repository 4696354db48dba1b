"""What a caller of the API gives: the keyword options, the limits among them, inputs."""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypedDict, TypeVar

from pybox._core.errors import InvalidRequest
from pybox._core.events import RunEvent
from pybox._core.limit_surfaces import api_limits_doc
from pybox._core.limits import LIMIT_FIELDS
from pybox._core.repair import RepairBudget, RepairGoal, RepairModel
from pybox._core.request import InputFile

InputLike = InputFile | tuple[str, bytes]
_F = TypeVar("_F", bound=Callable[..., object])
# Called with "stdout" or "stderr" and the bytes the program just printed there.
OutputCallback = Callable[[str, bytes], None]
EventCallback = Callable[[RunEvent], None]
GoalLike = RepairGoal | str
ModelLike = RepairModel | str | Sequence[str]


class LimitOptions(TypedDict, total=False):
    """The per-run box limits, in base units (None: the operator's default).

    Written out for type checkers; `LIMIT_FIELDS` is the table it must match (a
    unit test says so), and the table is what parses them at run time.
    """

    timeout_s: float | None
    memory_bytes: int | None
    cpus: float | None
    pids: int | None
    open_files: int | None
    writable_bytes: int | None
    output_bytes: int | None
    output_files: int | None
    output_files_bytes: int | None
    input_bytes: int | None


class StreamOptions(LimitOptions, total=False):
    """The keyword arguments of `Client.stream` and `stream_container`."""

    inputs: Iterable[InputLike]
    argv: Sequence[str]
    stdin: str | bytes | None
    env: Mapping[str, str] | Iterable[tuple[str, str]] | None
    collect_outputs: bool
    output_dir: str | os.PathLike[str] | None
    image: str
    code_name: str
    cancel: threading.Event | None


class RunOptions(StreamOptions, total=False):
    """The keyword arguments of `Client.run` and `run_container`."""

    on_output: OutputCallback | None
    on_event: EventCallback | None


class RepairOptions(LimitOptions, total=False):
    """The optional keyword arguments of `Client.repair` and `repair`."""

    budget: RepairBudget | None
    code_name: str
    image: str
    cancel: threading.Event | None


def _limit_keywords(func: _F) -> _F:
    """Show `**limits` as the table's ten keyword-only parameters, first among the
    keywords (help(), IDEs; as in `RunOptions`), and list them with their units in
    the docstring. `Client.run` used to spell the ten out by hand."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    at = next((i for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY), len(params))
    limits = [
        inspect.Parameter(
            f.attr,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=f"{'int' if f.integral else 'float'} | None",
        )
        for f in LIMIT_FIELDS
    ]
    func.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*params[:at], *limits, *params[at:]]
    )
    func.__doc__ = (
        f"{(func.__doc__ or '').rstrip()}\n\n"
        "        Per-run limits (keywords; None or left out: the operator's default):\n\n"
        f"{api_limits_doc(indent='        ')}\n"
    )
    return func


def _inputs(inputs: Iterable[InputLike]) -> tuple[InputFile, ...]:
    converted: list[InputFile] = []
    for item in inputs:
        if isinstance(item, InputFile):
            converted.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            name, data = item
            if isinstance(data, str):
                data = data.encode("utf-8")
            converted.append(InputFile(name, data))
        else:
            raise InvalidRequest(
                f"Each input must be a (name, bytes) pair or an InputFile, not {item!r}."
            )
    return tuple(converted)


def _env(env: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    pairs = env.items() if isinstance(env, Mapping) else env
    converted: list[tuple[str, str]] = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise InvalidRequest(f"env must be a mapping or (name, value) pairs, not {pair!r}.")
        converted.append((pair[0], pair[1]))
    return tuple(converted)
