"""`pybox sweep`, `pybox doctor` and `pybox version`."""

from __future__ import annotations

import argparse
import os
import sys

from pybox._core.display import plural
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    Commands,
    add_tool_flags,
    boxes_exist,
    open_session,
    say,
    tool_paths,
)
from pybox._version import __version__

ENGINE_TITLES = {"docker": "Docker", "podman": "Podman"}


def cmd_sweep(args: argparse.Namespace) -> int:
    report = open_session(args).sweep()
    for name in report.removed:
        say(f"removed {name} (confirmed gone)", sys.stdout)
    for name, why in report.kept:
        say(f"kept {name}: {why}", sys.stdout)
    for name in report.not_confirmed:
        say(f"could NOT confirm {name} removed", sys.stdout)
    if not (report.removed or report.kept or report.not_confirmed):
        say("no pybox boxes found", sys.stdout)
    return EXIT_PYBOX_FAILED if report.not_confirmed else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from pybox._orchestration.doctor import diagnose

    report = diagnose(os.environ, args.config, tool_paths(args))
    # A problem found is a failure: scripts and CI can rely on the exit code.
    code = 0 if report["ok"] else EXIT_PYBOX_FAILED
    if args.json:
        say(json.dumps(report, indent=2), sys.stdout)
        return code
    out = sys.stdout
    platform_facts = report["platform"]
    say(
        f"pybox {report['pybox_version']} on {platform_facts['system']} "
        f"{platform_facts['machine']}, Python {platform_facts['python']}",
        out,
    )
    if "pybox_platform" in platform_facts:
        say(f"platform: {platform_facts['pybox_platform']} ({platform_facts['chosen_by']})", out)
    colima = report.get("colima")
    if colima and colima.get("colima"):
        say(
            f"colima: {colima['colima']['path']} ({colima['colima']['found_by']}), "
            f"version {colima.get('version', 'unknown')}",
            out,
        )
        docker_cli = colima.get("docker_cli")
        say(
            f"docker: {docker_cli['path']} (version {docker_cli['version'] or 'unknown'})"
            if docker_cli
            else "docker: not found in a trusted place",
            out,
        )
    vm = report.get("vm")
    if vm:
        verified = " (no mounts, no port forwards: verified)" if vm["isolation_verified"] else ""
        say(f"vm:     Colima profile {vm['profile']}: {vm['state']}{verified}", out)
    engine = report.get("engine")
    if engine:
        say(f"engine: {engine['socket']} (found by {engine['found_by']})", out)
        if engine.get("chosen_by"):
            say(f"        {engine['chosen_by']}", out)
        if engine.get("reachable"):
            title = ENGINE_TITLES.get(engine.get("name", "docker"), "Docker")
            say(
                f"        {title} {engine['server_version']}, API {engine['api_version']}, cgroup v"
                f"{engine['cgroup_version']} ({engine['cgroup_driver']}), "
                f"runtimes {', '.join(engine['runtimes'])}",
                out,
            )
    confinement = report.get("confinement")
    if confinement:
        digest = confinement["seccomp_profile_sha256"] or "unreadable"
        say(f"filter: seccomp profile {confinement['seccomp_profile']} {digest[:19]}", out)
        say(f"        {confinement['apparmor']}", out)
    gvisor = report.get("gvisor")
    if gvisor:
        runtimes = report.get("config", {}).get("runtimes", {})
        lanes = f" (default {runtimes['default']}, allowed {', '.join(runtimes['allowed'])})"
        say(
            f"gvisor: registered as {gvisor['engine_runtime']} "
            f"{' '.join(gvisor['runtime_args'] or [])}{lanes if runtimes else ''}"
            if gvisor["registered"]
            else f"gvisor: not registered with the engine as {gvisor['engine_runtime']}",
            out,
        )
        for note in gvisor["notes"]:
            say(f"        {note}", out)
        if gvisor["daemon_config"]:
            for line in gvisor["daemon_config"].splitlines():
                say(f"        {line}", out)
    unchecked = report["unchecked"]
    if "images" in unchecked:
        say(f"images: {unchecked['images']}", out)
    for image in report.get("images", []):
        say(
            f"image:  {image['name']} {image['image_id'][:19]} {image['problem'] or 'ok'}",
            out,
        )
    if "boxes" in report:
        say(f"boxes:  {boxes_exist(len(report['boxes']))}", out)
    else:
        say(f"boxes:  {unchecked.get('boxes', 'unknown')}", out)
    for problem in report["problems"]:
        say(f"problem: {problem['what']}: {problem['detail']} -> next: {problem['next']}", out)
    say(
        "ok: no problems found"
        if report["ok"]
        else f"NOT ok: {plural(len(report['problems']), 'problem')} found",
        out,
    )
    for step in report["next"]:
        say(f"next:   {step}", out)
    return code


def cmd_version(args: argparse.Namespace) -> int:
    say(f"pybox {__version__}", sys.stdout)
    return 0


def register(commands: Commands) -> None:
    sweep = commands.add_parser("sweep", help="remove boxes left by runs that died")
    sweep.set_defaults(handler=cmd_sweep)
    doctor = commands.add_parser(
        "doctor", help="read-only check of platform, tools, VM, engine, images and leftovers"
    )
    doctor.add_argument("--json", action="store_true")
    add_tool_flags(doctor)
    doctor.set_defaults(handler=cmd_doctor)
    version = commands.add_parser("version", help="print the version")
    version.set_defaults(handler=cmd_version)
