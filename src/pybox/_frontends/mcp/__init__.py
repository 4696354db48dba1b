"""`pybox mcp`: the Model Context Protocol server, standard library only.

Layers, as in the MCP python-sdk: transports (`_stdio`, `_http`) carry frames;
the dispatcher (`_dispatcher`) speaks JSON-RPC and both protocol eras; the
toolbox (`_toolbox`) lists, checks and calls the tools declared in `_tools`
(one module per group: `_runtools`), and the resources (`_resources`) read
what the runs left, all through the orchestration `Session`.
`register(commands)` adds `pybox mcp` and `pybox config` to the command line
(wired in `pybox._main`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pybox._core.errors import ConfigError, PyboxError
from pybox._core.host_env import check_forward_names
from pybox._core.images import check_image_name
from pybox._core.limits import KIB, MIB, parse_user_value
from pybox._frontends.mcp._client_config import (
    CLIENTS,
    WHERE,
    carried_environment,
    client_config,
)
from pybox._frontends.mcp._connection import Connection, log
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._http.server import HttpServer
from pybox._frontends.mcp._http.settings import add_http_arguments, http_limits, http_settings
from pybox._frontends.mcp._runs import RunRegistry, add_registry_arguments, registry_from_args
from pybox._frontends.mcp._startup import Machine, check_images, machine_fit
from pybox._frontends.mcp._stdio import StdioServer, claim_stdio
from pybox._frontends.mcp._toolbox import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_RUNNING,
    DEFAULT_REPLY_BYTES,
    ServerOptions,
    Tool,
    Toolbox,
    tool_groups,
)
from pybox._frontends.mcp._tools import TOOL_GROUPS, TOOLS
from pybox._orchestration.session import Session

__all__ = [
    "Connection",
    "Dispatcher",
    "ServerOptions",
    "build_dispatcher",
    "operator_environ",
    "register",
]

# Operator flag -> (limit key, help). Ceilings first, then defaults.
CEILING_FLAGS: dict[str, tuple[str, str]] = {
    "--max-timeout": ("timeout_s", "ceiling on a run's wall-clock time, in seconds"),
    "--max-memory": ("memory_mib", "ceiling on a run's memory, in MiB"),
    "--max-cpus": ("cpus", "ceiling on a run's CPUs"),
    "--max-pids": ("pids", "ceiling on a run's processes"),
    "--max-writable": ("writable_mib", "ceiling on a run's writable space per tmpfs, in MiB"),
    "--max-output": ("output_kib", "ceiling on output kept per stream, in KiB"),
    "--max-input": ("input_mib", "ceiling on code plus input files, in MiB"),
    "--max-files": ("output_files", "ceiling on files a run may return"),
}
DEFAULT_FLAGS: dict[str, tuple[str, str]] = {
    "--default-timeout": ("timeout_s", "a run's wall-clock time when it asks for none, in s"),
    "--default-memory": ("memory_mib", "a run's memory when it asks for none, in MiB"),
}


TOOLS_HELP = (
    f"comma-separated tool groups agents may use, of: {', '.join(TOOL_GROUPS)} (default: all)"
)


def _flag_attr(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def operator_environ(args: argparse.Namespace, environ: Any) -> dict[str, str]:
    """The environment with the operator's flags applied last (they win over
    PYBOX_MAX_* and PYBOX_DEFAULT_* and the config file)."""
    env = dict(environ)
    for flags, prefix in ((CEILING_FLAGS, "PYBOX_MAX_"), (DEFAULT_FLAGS, "PYBOX_DEFAULT_")):
        for flag, (key, _) in flags.items():
            value = getattr(args, _flag_attr(flag))
            if value is not None:
                parse_user_value(key, value, flag)  # a bad flag is named as the flag
                env[prefix + key.upper()] = value
    return env


def _images(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        try:
            check_image_name(name)
        except Exception as exc:
            raise ConfigError(f"--images: {exc}") from None
    return names


def _groups(text: str | None) -> tuple[str, ...] | None:
    """The tool groups `--tools` turns on (None: all of them)."""
    return None if text is None else tool_groups(text, TOOL_GROUPS)


def _forward_env(names: Sequence[str] | None) -> tuple[str, ...]:
    """`--forward-env NAME` (repeatable): each an environment variable name."""
    try:
        return check_forward_names(list(names or ()), "--forward-env")
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("forward_env: ", "", 1)) from None


def _positive(flag: str, value: int) -> int:
    if value < 1:
        raise ConfigError(f"{flag} must be at least 1, not {value}.")
    return value


def build_dispatcher(
    session: Session,
    options: ServerOptions,
    registry: RunRegistry | None = None,
    tools: Iterable[Tool] = TOOLS,
) -> Dispatcher:
    return Dispatcher(Toolbox(session, registry or RunRegistry(session), options, tools))


def cmd_mcp(args: argparse.Namespace) -> int:
    groups = _groups(args.tools)  # before anything is opened: a typo starts nothing
    forward_env = _forward_env(args.forward_env)
    env = operator_environ(args, os.environ)
    # A server is long-lived: it keeps a warm pool of single-use boxes.
    session = Session.open(env, args.config, warm_pool=True, log=log)
    options = ServerOptions(
        images=_images(args.images),
        reply_bytes=_positive("--reply-output", args.reply_output) * KIB,
        max_running=_positive("--max-running", args.max_running),
        max_message_bytes=_positive("--max-message", args.max_message) * MIB,
        tool_groups=groups,
        forward_env=forward_env,
    )
    check_images(options.images, session.recorded_images(), str(session.state_dir))
    _experiment_roots(session, args.project_root or ())
    options = _fit_machine(session, options)
    dispatcher = build_dispatcher(session, options, registry_from_args(session, args, log))
    try:
        _warm_up(session)
        if options.tool_groups is None or "sandboxes" in options.tool_groups:
            _sweep_sandboxes(session)
        if options.tool_groups is None or "experiments" in options.tool_groups:
            _prune_experiments(session)
        if args.http is not None:
            limits = http_limits(args, options.max_message_bytes)
            settings, generated = http_settings(
                args.http, os.environ, tuple(args.allow_origin or ()), limits
            )
            server = HttpServer(settings, dispatcher)
            if generated:
                log(f"bearer token (send as 'Authorization: Bearer <token>'): {settings.token}")
            return server.serve()
        with claim_stdio() as (reader, writer):
            return StdioServer(dispatcher, reader, writer).serve()
    finally:
        for name in session.close():
            log(f"could not confirm the waiting box {name} removed; `pybox sweep` will")


def _experiment_roots(session: Session, roots: Iterable[str]) -> None:
    """`--project-root DIR`: folders projects may be copied from, checked at start;
    each operation on an experiment logs one JSON event on stderr."""
    from pathlib import Path

    session.experiment_settings = session.experiment_settings.with_roots(
        tuple(_project_root(Path(root)) for root in roots)
    )
    session.experiment_events = sys.stderr


def _project_root(root: Path) -> str:
    try:
        resolved = root.expanduser().resolve(strict=True)
    except OSError as exc:
        raise ConfigError(
            f"--project-root {root}: {exc.strerror or exc}. Give an existing folder."
        ) from None
    if not resolved.is_dir():
        raise ConfigError(f"--project-root {root} is not a folder. Give a folder of projects.")
    return str(resolved)


def _fit_machine(session: Session, options: ServerOptions) -> ServerOptions:
    """Refuse a policy whose defaults the engine's machine cannot give; warn about
    ceilings above it. An engine not reachable now is not fatal: runs will say so."""
    try:
        report = session.engine_report()
    except PyboxError as exc:
        log(f"could not read the engine's CPUs and memory ({exc}); limits not checked")
        return options
    machine = Machine(
        cpus=_count(report.get("cpus")), memory_bytes=_count(report.get("memory_bytes"))
    )
    problems, warnings = machine_fit(session.policy, machine)
    if problems:
        raise ConfigError(" ".join(problems))
    for warning in warnings:
        log(f"warning: {warning}")
    return dataclasses.replace(options, machine_memory_bytes=machine.memory_bytes)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


SANDBOX_SWEEP_EVERY_S = 60.0


def _sweep_sandboxes(session: Session) -> None:
    """Sweep the sandboxes now and every minute, in the background: a server that
    was killed finds its sandboxes (or destroys the expired ones) when it starts."""
    import threading

    def sweep_forever() -> None:
        while True:
            try:
                for line in session.sandboxes().sweep():
                    log(f"sandbox sweep: {line}")
            except PyboxError as exc:
                log(f"sandbox sweep skipped ({exc}); it runs again in a minute")
            time.sleep(SANDBOX_SWEEP_EVERY_S)

    threading.Thread(target=sweep_forever, name="pybox-sandbox-sweep", daemon=True).start()


def _prune_experiments(session: Session) -> None:
    """Hold ended experiments' kept files to the operator's age and budget at start
    (every destroy does too); never fatal."""
    try:
        pruned = session.experiments().prune()
    except (PyboxError, OSError) as exc:
        log(f"experiment prune skipped ({exc}); `pybox experiment prune` runs it")
        return
    for item in pruned["removed"]:
        log(
            f"experiment prune: removed {item['experiment_id']}'s kept files "
            f"({item['size_bytes']} bytes): {item['because']}"
        )


def _warm_up(session: Session) -> None:
    """Start the default run's warm boxes in the background; never fatal."""
    try:
        session.warm_up()
    except PyboxError as exc:
        log(f"warm pool not started ({exc}); runs take the normal path")


class _ServerArgParser(argparse.ArgumentParser):
    """Parses --server-arg values as `pybox mcp` would, raising instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(
            f"--server-arg: {message}. `pybox mcp --help` lists what the server takes."
        )


def _checked_server_args(server_args: Sequence[str]) -> argparse.Namespace:
    """The server arguments parsed and their values checked, so a configuration is never
    printed with arguments the server would refuse at every start."""
    asked_help = [arg for arg in server_args if arg in ("-h", "--help")]
    if asked_help:
        raise ConfigError(f"--server-arg: {asked_help[0]} is not a server argument.")
    # The very parser of `pybox mcp`, built again with errors that raise.
    parser = _ServerArgParser(prog="pybox", add_help=False)
    register(parser.add_subparsers(parser_class=_ServerArgParser))
    parsed = parser.parse_args(["mcp", *server_args])
    if parsed.http is not None or parsed.allow_origin:
        raise ConfigError(
            "--server-arg: --http and --allow-origin are not for a client configuration: the "
            "client starts the server on stdio. Start an HTTP server yourself with "
            "`pybox mcp --http HOST:PORT` and point the client at its URL."
        )
    if getattr(parsed, "config", None) is not None:
        raise ConfigError(
            "--server-arg: give the config file as `pybox config --config PATH` instead; it "
            "is checked and written into the configuration as an absolute path."
        )
    operator_environ(parsed, {})  # every ceiling and default flag is a valid number
    _images(parsed.images)
    _groups(parsed.tools)
    _forward_env(parsed.forward_env)
    _positive("--reply-output", parsed.reply_output)
    _positive("--max-running", parsed.max_running)
    _positive("--max-message", parsed.max_message)
    return parsed


def cmd_client_config(args: argparse.Namespace) -> int:
    server_args = list(args.server_arg or ())
    if args.tools is not None:
        server_args.append(f"--tools={args.tools}")
    parsed = _checked_server_args(server_args)
    config_path = args.config
    if config_path is not None:
        path = Path(config_path).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"--config: the config file {path} does not exist.")
        config_path = str(path)
        server_args = ["--config", config_path, *server_args]
    # Load the policy the server will load: a broken file or variable is said now,
    # not by a client that cannot start the server.
    session = Session.open(operator_environ(parsed, os.environ), config_path)
    check_images(_images(parsed.images), session.recorded_images(), str(session.state_dir))
    text = client_config(args.client, args.format, server_args, carried_environment(os.environ))
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"pybox: {WHERE[args.client]}\n")
    return 0


def register(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve the Model Context Protocol (stdio, or Streamable HTTP with --http)",
        description="Serve pybox to AI agents over MCP. stdout carries only the protocol; "
        "logs go to stderr. Operator flags set ceilings an agent cannot exceed.",
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free "
        "port). Needs the bearer token printed at start, or the one in PYBOX_MCP_TOKEN "
        "(required for a non-loopback address).",
    )
    mcp.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="an extra browser Origin allowed to call the HTTP endpoint (repeatable)",
    )
    add_http_arguments(mcp)
    add_registry_arguments(mcp)
    mcp.add_argument(
        "--images", metavar="NAMES", help="comma-separated images agents may use (default: all)"
    )
    mcp.add_argument("--tools", metavar="GROUPS", help=TOOLS_HELP)
    mcp.add_argument(
        "--project-root",
        action="append",
        metavar="DIR",
        help="a folder whose projects experiments may copy (repeatable; added to the "
        "config's [experiments] project_roots)",
    )
    mcp.add_argument(
        "--forward-env",
        action="append",
        metavar="NAME",
        help="an environment variable of this server that agents may forward into an "
        "experiment by NAME alone (repeatable; added to the config's forward_env). Without "
        "it an agent gives NAME=VALUE: the server's own environment never reaches a box "
        "unless listed here",
    )
    for flag, (_, help_text) in {**CEILING_FLAGS, **DEFAULT_FLAGS}.items():
        mcp.add_argument(flag, metavar="N", help=help_text)
    mcp.add_argument(
        "--reply-output",
        type=int,
        default=DEFAULT_REPLY_BYTES // KIB,
        metavar="KIB",
        help="output per stream put in a tool result, head and tail (default: %(default)s); "
        "the full output stays in the run's resources",
    )
    mcp.add_argument(
        "--max-running",
        type=int,
        default=DEFAULT_MAX_RUNNING,
        metavar="N",
        help="runs going at once (default: %(default)s)",
    )
    mcp.add_argument(
        "--max-message",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES // MIB,
        metavar="MIB",
        help="largest JSON-RPC message accepted (default: %(default)s)",
    )
    # Here too, not only before the command, so `pybox mcp --config PATH` works
    # (SUPPRESS: `pybox --config PATH mcp` keeps its value).
    mcp.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        help="operator config file (TOML); default $PYBOX_CONFIG",
    )
    mcp.set_defaults(handler=cmd_mcp)

    config = commands.add_parser(
        "config", help="print the MCP configuration for a client (stdout: only the config)"
    )
    config.add_argument("--client", required=True, choices=CLIENTS)
    config.add_argument("--format", choices=("text", "json"), default="text")
    config.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        help="the operator config file the server loads (checked; written as an absolute path)",
    )
    config.add_argument("--tools", metavar="GROUPS", help=TOOLS_HELP + "; passed to the server")
    config.add_argument(
        "--server-arg",
        action="append",
        metavar="ARG",
        help="an argument for `pybox mcp`, such as --max-memory=256 (repeatable)",
    )
    config.set_defaults(handler=cmd_client_config)
