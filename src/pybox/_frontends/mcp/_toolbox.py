"""Tools as declarations, and the toolbox that lists, checks and calls them.

Each tool is one `Tool`: its name, group, title, description, input schema
(possibly built from the server's options), handler, output schema and hints.
`tools/list`, the argument check and the dispatch all read the same
declarations, so a tool cannot be listed with one schema and checked against
another, or callable without being listed. An alias (`get_run` for
`get_result`) is a declaration too, marked with the name it stands for.

Tools come in groups (`runs`; next `sandboxes`, `experiments`) that the
operator switches on with `pybox mcp --tools GROUP[,GROUP]`. A tool of a group
that is off is not listed, and calling it is the unknown-tool error.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pybox._core.errors import ConfigError, PyboxError
from pybox._core.host_env import HostEnvPolicy
from pybox._frontends.mcp._protocol import INVALID_PARAMS, JSONObject, RpcError
from pybox._frontends.mcp._schema import PropertyCheck, check_arguments

if TYPE_CHECKING:
    from pybox._frontends.mcp._runs import RunRegistry
    from pybox._orchestration.session import Session

DEFAULT_REPLY_BYTES = 8 * 1024
DEFAULT_MAX_RUNNING = 4
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

Progress = Callable[[float, float | None, str], None]


class Cancelled(Exception):
    """The request was cancelled by the client: no response is sent for it."""


@dataclass(frozen=True)
class ServerOptions:
    """What the operator chose for this server, beyond the limit policy."""

    images: tuple[str, ...] | None = None  # None: every image pybox has recorded
    reply_bytes: int = DEFAULT_REPLY_BYTES  # per stream, head and tail, in a tool result
    max_running: int = DEFAULT_MAX_RUNNING  # runs going at once
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # one JSON-RPC message, as received
    # The engine machine's memory (engine-observed at start); None: not known. A run
    # asking for more is refused, as one asking for more CPUs than the engine has.
    machine_memory_bytes: int | None = None
    tool_groups: tuple[str, ...] | None = None  # None: every group there is
    # `--forward-env NAME`: names an agent may forward by name alone from the server's
    # environment, besides the config's `forward_env` (none by default).
    forward_env: tuple[str, ...] = ()


@dataclass
class CallContext:
    """What a running tool call may use: progress reporting and its cancellation."""

    cancel: threading.Event
    progress: Progress | None = None
    tool: str = ""  # the name called (an alias's own name), for messages


def text_result(text: str, *, is_error: bool) -> JSONObject:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


@dataclass(frozen=True)
class Hints:
    """The tool's annotations (MCP `ToolAnnotations`): how a client may treat a call."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool = False  # no pybox tool reaches outside: boxes have no network


Handler = Callable[["Toolbox", JSONObject, CallContext], JSONObject]
Built = Callable[["Toolbox"], Any]  # text or schema built from the server's options


@dataclass(frozen=True)
class Tool:
    """One tool, declared once."""

    name: str
    group: str
    title: str
    description: str | Callable[[Toolbox], str]
    input_schema: JSONObject | Callable[[Toolbox], JSONObject]
    handler: Handler
    hints: Hints
    output_schema: JSONObject | None = None
    # Properties checked by a function of their own instead of the generic schema check.
    checks: Mapping[str, PropertyCheck] = field(default_factory=dict)
    alias_of: str | None = None  # the tool this name stands for (kept for older clients)
    also_in: tuple[str, ...] = ()  # other groups that offer this tool (one declaration)

    def listing(self, toolbox: Toolbox) -> JSONObject:
        """This tool's `tools/list` entry."""
        entry: JSONObject = {"name": self.name, "title": self.title}
        entry["description"] = _built(self.description, toolbox)
        entry["inputSchema"] = _built(self.input_schema, toolbox)
        if self.output_schema is not None:
            entry["outputSchema"] = self.output_schema
        hints = self.hints
        entry["annotations"] = {
            "title": self.title.removesuffix(f" (alias of {self.alias_of})"),
            "readOnlyHint": hints.read_only,
            "destructiveHint": hints.destructive,
            "idempotentHint": hints.idempotent,
            "openWorldHint": hints.open_world,
        }
        return entry


def alias(target: Tool, name: str, description: str | Callable[[Toolbox], str]) -> Tool:
    """`name` as another name of `target`: the same schema, handler and group."""
    return dataclasses.replace(
        target,
        name=name,
        title=f"{target.title} (alias of {target.name})",
        description=description,
        alias_of=target.name,
    )


def _built(value: Any, toolbox: Toolbox) -> Any:
    return value(toolbox) if callable(value) else value


def groups_of(tools: Iterable[Tool]) -> tuple[str, ...]:
    """The groups these tools belong to, in the order they are declared."""
    return tuple(dict.fromkeys(tool.group for tool in tools))


def tool_groups(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """The groups `--tools GROUP[,GROUP]` names; refused unless each one exists."""
    return check_groups(tuple(name.strip() for name in text.split(",") if name.strip()), known)


def check_groups(names: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    if not names:
        raise ConfigError(
            f"--tools names no tool group; name at least one of: {', '.join(known)} "
            "(or leave --tools out for all of them)."
        )
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(
            f"--tools: there is no tool group {', '.join(map(repr, unknown))}; the groups "
            f"are: {', '.join(known)}."
        )
    return tuple(dict.fromkeys(names))


class Toolbox:
    """The tools one server offers: listed, checked and called from their declarations."""

    def __init__(
        self,
        session: Session,
        registry: RunRegistry,
        options: ServerOptions,
        declarations: Iterable[Tool],
    ) -> None:
        self.session = session
        self.registry = registry
        self.options = options
        # The server's environment is the operator's, not the agent's: a name alone
        # takes a value from it only when the operator listed that name.
        self.host_env = HostEnvPolicy.operator_listed((*session.forward_env, *options.forward_env))
        every = tuple(declarations)
        self.known_groups = groups_of(every)
        chosen = options.tool_groups
        self.groups = (
            self.known_groups if chosen is None else check_groups(chosen, self.known_groups)
        )
        names = [tool.name for tool in every]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"tools declared twice: {', '.join(duplicated)}")
        self._tools = {
            tool.name: tool
            for tool in every
            if tool.group in self.groups or any(g in self.groups for g in tool.also_in)
        }

    def egress_modes(self) -> tuple[str, ...]:
        """The network modes the operator's policy allows boxes to ask for."""
        return self.session.egress_settings.modes

    def allowed_images(self) -> list[str]:
        recorded = sorted(self.session.recorded_images())
        if self.options.images is None:
            return recorded
        return [name for name in self.options.images if name in recorded]

    def tools(self) -> list[JSONObject]:
        """The `tools/list` entries of the enabled tools."""
        return [tool.listing(self) for tool in self._tools.values()]

    def call(self, name: str, args: JSONObject, ctx: CallContext) -> JSONObject:
        """Check `args` against the tool's schema, then run its handler.

        ArgumentError for arguments that do not fit the schema; a value pybox
        refuses (a limit below its minimum) is an isError result."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools)
            raise RpcError(INVALID_PARAMS, f"Unknown tool {name!r}. Tools: {known}.")
        try:
            checked = check_arguments(name, _built(tool.input_schema, self), args, tool.checks)
        except PyboxError as exc:
            return text_result(f"{name} refused: {exc}", is_error=True)
        return tool.handler(self, checked, dataclasses.replace(ctx, tool=name))
