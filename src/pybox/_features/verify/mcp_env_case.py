"""The `mcp_env` case of `pybox verify`: an MCP agent asks for the server's own
environment by name (issue 29, finding 1).

A real `pybox mcp` server runs over stdio in a process whose environment holds a
random canary variable. As an agent, the case names the canary in
`create_experiment(env=[...])`, which must be refused with the operator's
`forward_env` named; then it creates an experiment without it and dumps, inside,
the environment of every process it can read: the canary must be in none of the
bytes the box sent. The server talks JSON-RPC, one message a line; what the box
printed comes back inside the tool result and is untrusted.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import time
from typing import Any

from pybox._core.posture import LABEL_RUN_ID
from pybox._features.verify.harness import Suite
from pybox._features.verify.verdict import Verdict, case_source, judge_gone, program_report

REPLY_WAIT_S = 120.0
SERVER_EXIT_WAIT_S = 60.0


class _Agent:
    """The client half of MCP over stdio, as little as the case needs."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.next_id = 0
        self.pending = b""

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + REPLY_WAIT_S
        while True:
            reply = json.loads(self._line(deadline))
            if isinstance(reply, dict) and reply.get("id") == self.next_id:
                return reply

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        result = reply.get("result")
        if not isinstance(result, dict):
            raise OSError(f"{tool}: the server answered with no result: {str(reply)[:300]}")
        return result

    def _line(self, deadline: float) -> bytes:
        fd = self.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise OSError(f"the MCP server did not answer within {REPLY_WAIT_S:g} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise OSError("the MCP server closed its stdout")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line


def _text(result: dict[str, Any]) -> str:
    return "\n".join(str(part.get("text", "")) for part in result.get("content") or [])


def run_mcp_env(suite: Suite, verdict: Verdict) -> None:
    name = f"VERIFY_SERVER_CANARY_{secrets.token_hex(4).upper()}"  # not PYBOX_*: reserved
    value = secrets.token_hex(16)
    roots = suite.workdir / "mcp-projects"
    project = roots / "project"
    project.mkdir(parents=True)
    (project / "app.py").write_text("print('hi')\n")
    extra = {name: value, "PYBOX_POOL_BOXES": "0"}  # no warm boxes: the case makes its own
    args = ("--tools", "experiments", "--project-root", str(roots))
    with suite.pybox_process(extra, "mcp", *args) as server:
        agent = _Agent(server)
        agent.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "pybox-verify", "version": "1"},
            },
        )
        agent.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        verdict.saw("pybox", f"a `pybox mcp` server over stdio whose environment has {name}")
        asked = {"project": str(project), "limits": {"timeout_s": 30}}
        first = agent.call("create_experiment", {**asked, "env": [name]})
        # Not refused: the dump runs in the very experiment that was handed the canary.
        created = first if not _refused(first, verdict, name, value) else None
        created = created or agent.call("create_experiment", asked)
        _judge_experiment(suite, agent, verdict, created, name, value)
        try:  # end of input: the server exits, its own boxes removed
            server.communicate(timeout=SERVER_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            verdict.check(False, "the MCP server did not exit at the end of its input")


def _refused(result: dict[str, Any], verdict: Verdict, name: str, value: str) -> bool:
    text = _text(result)
    ok = (
        result.get("isError") is True
        and f'forward_env = ["{name}"]' in text
        and f"--forward-env {name}" in text
    )
    if verdict.check(ok, f"naming the server's {name} was not refused: {text[:300]!r}"):
        verdict.saw("pybox", "create_experiment(env=[name]) refused, naming forward_env")
    verdict.check(value not in json.dumps(result), "the refusal carried the canary's value")
    return ok


def _judge_experiment(
    suite: Suite,
    agent: _Agent,
    verdict: Verdict,
    created: dict[str, Any],
    name: str,
    value: str,
) -> None:
    made = created.get("structuredContent") or {}
    experiment_id, sandbox_id = made.get("experiment_id"), made.get("sandbox_id")
    if not verdict.check(
        created.get("isError") is False and isinstance(sandbox_id, str),
        f"no experiment was made: {_text(created)[:300]!r}",
    ):
        return
    verdict.run_ids.append(str(sandbox_id))
    boxes = suite.engine.list_containers({LABEL_RUN_ID: str(sandbox_id)})
    container_id = str(boxes[0]["Id"]) if boxes else None
    facts = suite.engine.box_facts(container_id) if container_id is not None else None
    if facts is not None:
        seen = facts.values_of("HostConfig.Runtime")
        lane = suite.session.runtime_choice().engine_runtime
        if verdict.check(seen == (lane,), f"the experiment's box runs in {seen!r}"):
            verdict.saw("engine", f"the experiment's box runs in runtime {lane}")
    try:
        source = case_source("mcp_env").decode()
        job = agent.call(
            "execute_experiment",
            {"experiment_id": experiment_id, "argv": ["python3", "-c", source]},
        )
        described = job.get("structuredContent") or {}
        stdout = str(described.get("stdout", "")).encode()
        stderr = str(described.get("stderr", "")).encode()
        if program_report(stdout, stderr, verdict):
            sent = stdout + stderr
            if verdict.check(
                name.encode() not in sent and value.encode() not in sent,
                "the MCP server's canary variable reached the experiment's box",
            ):
                verdict.saw(
                    "pybox",
                    f"the canary {name} of the server's environment is in none of the "
                    f"{len(sent)} bytes the box sent (environments of every readable process "
                    "included)",
                )
            whole = all(
                described.get(f"{stream}_bytes") == len(kept)
                for stream, kept in (("stdout", stdout), ("stderr", stderr))
            )
            verdict.check(whole, "the output was shortened, so the canary search is incomplete")
    finally:
        destroyed = agent.call("destroy_experiment", {"experiment_id": experiment_id})
        state = (destroyed.get("structuredContent") or {}).get("state")
        verdict.check(state == "destroyed", f"destroy_experiment left it {state!r}")
    judge_gone(verdict, suite.engine, container_id, state == "destroyed", suite.cgroup_exists)
