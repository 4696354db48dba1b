"""A model's reply parsed into at most one complete program, or why not."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pybox._core.repair.goal import sha256_hex


@dataclass(frozen=True)
class Proposal:
    code: bytes

    @property
    def sha256(self) -> str:
        return sha256_hex(self.code)


@dataclass(frozen=True)
class InvalidProposal:
    reason: str


PYTHON_INFOS = ("", "python", "python3", "py")
_OPENING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")


def _fenced_blocks(reply: str) -> tuple[list[tuple[str, str]], bool]:
    """(info string, body) for every fenced block, and whether the last one was closed."""
    lines = reply.replace("\r\n", "\n").split("\n")
    blocks: list[tuple[str, str]] = []
    index = 0
    while index < len(lines):
        opening = _OPENING_FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        fence, info = opening.group(1), opening.group(2).lower()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        while index < len(lines) and not closing.match(lines[index]):
            body.append(lines[index])
            index += 1
        if index >= len(lines):
            return blocks, False
        index += 1
        blocks.append((info, "\n".join(body) + "\n"))
    return blocks, True


def _code_from_json(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("code"), str):
        code: str = value["code"]
        return code
    return None


def extract_proposal(reply: str, max_bytes: int) -> Proposal | InvalidProposal:
    """The one complete program in a model's reply, or why there is none.

    Accepted: a JSON object with a "code" string (the whole reply, or a block
    marked json), or exactly one fenced block marked python (or unmarked).
    """
    stripped = reply.strip()
    code: str | None = _code_from_json(stripped) if stripped.startswith("{") else None
    if code is None:
        blocks, closed = _fenced_blocks(reply)
        if not closed:
            return InvalidProposal(
                "a code block is not closed (the reply may have been cut off); "
                "no partial program is run"
            )
        candidates: list[str] = []
        for info, body in blocks:
            if info in PYTHON_INFOS:
                candidates.append(body)
            elif info == "json" and (found := _code_from_json(body)) is not None:
                candidates.append(found)
        if not candidates:
            return InvalidProposal(
                'the reply holds no ```python code block and no JSON object with a "code" string'
            )
        if len(candidates) > 1:
            return InvalidProposal(
                f"the reply holds {len(candidates)} code blocks; exactly one complete "
                "program is needed"
            )
        code = candidates[0]
    if not code.strip():
        return InvalidProposal("the proposed program is empty")
    data = code.encode("utf-8", "surrogatepass")
    if len(data) > max_bytes:
        return InvalidProposal(
            f"the proposed program is {len(data)} bytes; the most accepted is {max_bytes} "
            "bytes (proposal_bytes), so it was refused without running"
        )
    return Proposal(data)
