"""`pybox vm start | stop | status | delete`: pybox's own Colima VM (macOS)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pybox._features.vm.control import (
    VMState,
    colima_of,
    delete_vm,
    size_of,
    start_vm,
    stop_vm,
    vm_state,
)
from pybox._frontends.cli._common import (
    ArgumentParser,
    Commands,
    add_tool_flags,
    open_session,
    progress,
    say,
    tool_paths,
)


def _colima(args: argparse.Namespace, *, require_docker: bool = False) -> Any:
    session = open_session(args)
    return session.host, colima_of(session.host, tool_paths(args), require_docker=require_docker)


def _show(state: VMState, as_json: bool) -> None:
    facts = state.to_dict()
    if as_json:
        say(json.dumps(facts, indent=2), sys.stdout)
        return
    out = sys.stdout
    say(f"vm:      Colima profile {facts['profile']}: {facts['state']}", out)
    if state.state == "running":
        say(f"engine:  {facts['docker_socket']}", out)
        say(
            f"size:    {facts['cpus']} CPUs, {facts['memory_bytes']} bytes of memory, "
            f"{facts['disk_bytes']} bytes of disk",
            out,
        )
        if facts["isolation_verified"]:
            say("checked: no host folders mounted, no ports forwarded, docker runtime", out)
        for problem in facts["problems"]:
            say(f"REFUSED: {problem}", out)
    elif facts["detail"]:
        say(f"colima:  {facts['detail']}", out)


def cmd_vm_start(args: argparse.Namespace) -> int:
    host, colima = _colima(args, require_docker=True)  # Colima's docker runtime needs the CLI
    state = start_vm(colima, size_of(host), progress)
    _show(state, args.json)
    return 0


def cmd_vm_stop(args: argparse.Namespace) -> int:
    _, colima = _colima(args)
    _show(stop_vm(colima), args.json)
    return 0


def cmd_vm_status(args: argparse.Namespace) -> int:
    _, colima = _colima(args)
    colima.require_version()
    state = vm_state(colima)
    _show(state, args.json)
    return 0 if state.state == "running" and not state.problems else 3


def cmd_vm_delete(args: argparse.Namespace) -> int:
    _, colima = _colima(args)
    if not args.yes:
        say("pybox vm delete (dry run: nothing will be changed)")
        say(f"  would run: colima delete --profile pybox --force --data ({colima.colima.path})")
        for path, why in colima.created_paths()[:3]:
            say(f"  would remove: {path} ({why})")
        say("  the images built in the VM go with it; `pybox setup --yes` makes them again")
        say("Run `pybox vm delete --yes` to do this.")
        return 0
    _show(delete_vm(colima), args.json)
    return 0


def register(commands: Commands) -> None:
    vm = commands.add_parser("vm", help="start, stop, check or delete pybox's VM (macOS)")
    actions = vm.add_subparsers(dest="vm_command", metavar="ACTION", parser_class=ArgumentParser)
    actions.required = True
    for name, handler, help_text in (
        ("start", cmd_vm_start, "start the VM with pybox's settings and verify it"),
        ("stop", cmd_vm_stop, "stop the VM"),
        ("status", cmd_vm_status, "show the VM's state and checks (exit 3 unless ready)"),
        ("delete", cmd_vm_delete, "delete the VM and its data (dry run without --yes)"),
    ):
        action = actions.add_parser(name, help=help_text)
        add_tool_flags(action)
        action.add_argument("--json", action="store_true", help="print the state as JSON")
        if name == "delete":
            action.add_argument("--yes", action="store_true", help="do it (without it: a dry run)")
        action.set_defaults(handler=handler)
