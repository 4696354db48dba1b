"""A scripted stand-in for the `colima` executable (and a `docker` CLI), for tests and benchmarks.

It lives in bench/ so that both the test suite and `bench/colima_path.py` can
use it without the benchmarks depending on the tests.

`install_fake_colima(folder, ...)` writes two small Python scripts into
`folder`. The fake `colima` records every call (argv and the environment it
was given) in `calls.jsonl` and answers like Colima 0.10.x: `version`,
`status --json` (its fields, and the error when stopped), `start` (which
writes the profile's colima.yaml and Lima's lima.yaml under COLIMA_HOME, and a
docker context under DOCKER_CONFIG, as Colima does), `stop`, `delete`, and
`ssh -- ARGV` (run here, on this machine, with its stdin, and without a
leading `sudo -n`; or answered from the `ssh_answers` script). Knobs in `fake-colima.json` make it
misbehave: an old version, host folders mounted, a port forwarder left on.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKE_COLIMA = r"""#!{python}
import hashlib, json, os, subprocess, sys
HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, "fake-colima.json")
with open(STATE) as handle:
    state = json.load(handle)
args = sys.argv[1:]
# `colima ssh` passes its stdin on to the command in the VM; record what came.
stdin = sys.stdin.buffer.read() if args[:1] == ["ssh"] else b""
with open(os.path.join(HERE, "calls.jsonl"), "a") as log:
    keep = ("PATH", "HOME", "DOCKER_CONFIG", "COLIMA_HOME", "DOCKER_HOST", "PYBOX_PLATFORM")
    log.write(json.dumps({{
        "argv": args, "env": {{k: os.environ.get(k) for k in keep}},
        "stdin_sha256": hashlib.sha256(stdin).hexdigest() if stdin else None,
    }}) + "\n")

def save():
    with open(STATE, "w") as handle:
        json.dump(state, handle)

def flag(name):
    return args[args.index(name) + 1] if name in args else None

def fatal(message, code=1):
    sys.stderr.write('time="2026-01-01T00:00:00Z" level=fatal msg="%s"\n' % message)
    sys.exit(code)

home = os.environ.get("COLIMA_HOME") or os.path.join(os.environ["HOME"], ".colima")
profile = flag("--profile") or "default"
display = "colima" if profile == "default" else "colima [profile=%s]" % profile
command = args[0] if args else ""

if command == "version":
    print("colima version %s" % state["version"])
    print("git commit: 0123456789abcdef0123456789abcdef01234567")
    if state["running"]:
        print("\nruntime: docker\narch: x86_64\nclient: v27.4.0\nserver: v27.4.0")
elif command == "status":
    if not state["running"]:
        fatal("%s is not running" % display)
    print(json.dumps({{
        "display_name": display, "driver": "macOS Virtualization.Framework",
        "arch": "aarch64", "runtime": "docker", "mount_type": "virtiofs",
        "docker_socket": state["docker_socket"],
        "containerd_socket": "unix://%s/%s/containerd.sock" % (home, profile),
        "kubernetes": False, "cpu": state.get("cpu", 2),
        "memory": state.get("memory", 2) << 30, "disk": state.get("disk", 20) << 30,
    }}))
elif command == "start":
    if state["running"]:
        sys.stderr.write('time="x" level=warning msg="already running, ignoring"\n')
        sys.exit(0)
    mounts = state.get("mounts") or []
    forwarder = state.get("port_forwarder") or flag("--port-forwarder") or "ssh"
    os.makedirs(os.path.join(home, profile), exist_ok=True)
    with open(os.path.join(home, profile, "colima.yaml"), "w") as handle:
        handle.write("# Number of CPUs to be allocated to the virtual machine.\n")
        handle.write("cpu: %s\ndisk: %s\nmemory: %s\narch: host\nruntime: docker\n"
                     % (flag("--cpu"), flag("--disk"), flag("--memory")))
        handle.write("kubernetes:\n  enabled: false\n  version: v1.33.4+k3s1\n  k3sArgs:\n"
                     "    - --disable=traefik\nautoActivate: false\nsshConfig: false\n")
        handle.write("portForwarder: %s\n" % forwarder)
        if mounts:
            handle.write("mounts:\n" + "".join(
                "  - location: %s\n    writable: true\n" % m for m in mounts))
        else:
            handle.write("mounts: []\n")
        handle.write("env: {{}}\nprovision: []\n")
    lima = os.path.join(home, "_lima", "colima-" + profile)
    os.makedirs(lima, exist_ok=True)
    with open(os.path.join(lima, "lima.yaml"), "w") as handle:
        handle.write("vmType: vz\ncpus: %s\n" % flag("--cpu"))
        if mounts:
            handle.write("mounts:\n" + "".join(
                "- location: %s\n  writable: true\n" % m for m in mounts))
        else:
            handle.write("mounts: []\n")
        handle.write("portForwards:\n- guestSocket: /var/run/docker.sock\n"
                     "  hostSocket: %s/%s/docker.sock\n" % (home, profile))
        if forwarder != "none":
            handle.write("- guestIPMustBeZero: true\n  guestPortRange: [1, 65535]\n")
    context = os.path.join(os.environ.get("DOCKER_CONFIG") or
                           os.path.join(os.environ["HOME"], ".docker"), "contexts", "meta", "x")
    os.makedirs(context, exist_ok=True)
    with open(os.path.join(context, "meta.json"), "w") as handle:
        json.dump({{"Name": "colima-" + profile}}, handle)
    state["running"] = True
    state["cpu"], state["memory"], state["disk"] = (
        int(flag("--cpu")), int(flag("--memory")), int(flag("--disk")))
    save()
elif command == "stop":
    state["running"] = False
    save()
elif command == "delete":
    import shutil
    shutil.rmtree(os.path.join(home, profile), ignore_errors=True)
    shutil.rmtree(os.path.join(home, "_lima", "colima-" + profile), ignore_errors=True)
    state["running"] = False
    save()
elif command == "ssh":
    if not state["running"]:
        fatal("%s not running" % display)
    remote = args[args.index("--") + 1:]
    # Scripted answers, first match by argv prefix, stand in for a VM's tools.
    for answer in state.get("ssh_answers") or []:
        if remote[:len(answer["argv"])] == answer["argv"]:
            if answer.get("stdout_file"):
                with open(answer["stdout_file"], "rb") as handle:
                    sys.stdout.buffer.write(handle.read())
            sys.stdout.write(answer.get("stdout", ""))
            sys.stderr.write(answer.get("stderr", ""))
            sys.exit(answer.get("code", 0))
    # Lima's user has password-less sudo; this machine has no sudo and tests run
    # as root, so the command runs here without it.
    if remote[:2] == ["sudo", "-n"]:
        remote = remote[2:]
    sys.exit(subprocess.run(remote, input=stdin).returncode)
else:
    fatal("unknown command %r" % command)
"""

FAKE_DOCKER = r"""#!{python}
import sys
print("Docker version 27.4.0, build bde2b89")
"""


@dataclass(frozen=True)
class FakeColima:
    folder: Path
    colima: Path
    docker: Path

    @property
    def state_file(self) -> Path:
        return self.folder / "fake-colima.json"

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    def set(self, **changes: Any) -> None:
        data = self.state()
        data.update(changes)
        self.state_file.write_text(json.dumps(data))

    def calls(self) -> list[dict[str, Any]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]


def install_fake_colima(
    folder: Path,
    *,
    version: str = "0.10.0",
    running: bool = False,
    docker_socket: str = "unix:///nonexistent/docker.sock",
    **knobs: Any,
) -> FakeColima:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    colima = folder / "colima"
    colima.write_text(FAKE_COLIMA.format(python=sys.executable))
    colima.chmod(0o755)
    docker = folder / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable))
    docker.chmod(0o755)
    fake = FakeColima(folder, colima, docker)
    state = {"version": version, "running": running, "docker_socket": docker_socket, **knobs}
    fake.state_file.write_text(json.dumps(state))
    return fake
