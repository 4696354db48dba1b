"""pip's output in the build box: its milestones shown as progress, and why it failed."""

from __future__ import annotations

import re

_SHOWN_PIP_LINES = ("Collecting", "Installing collected", "Successfully installed", "ERROR")

# pip 23-26: "    six==1.17.0 from https://.../six-...whl (from -r FILE (line 1)):"
_HASH_FAILURE_RE = re.compile(r"^\s+(?P<pin>\S+==\S+) from (?P<url>\S+?)(?: \(from .*\))?:?$")
# "Expected sha256 HEX", then "Expected     or HEX" for each further allowed hash.
_EXPECTED_RE = re.compile(r"^\s+Expected\s+(?:sha256|or)\s+(?P<hex>[0-9a-f]+)")
_GOT_RE = re.compile(r"^\s+Got\s+(?P<hex>\S+)")
_NOT_FOUND_RE = re.compile(
    r"(?:Could not find a version that satisfies the requirement|"
    r"No matching distribution found for) (?P<pin>\S+)"
)
_COLLECTING_RE = re.compile(r"^Collecting (?P<pin>\S+)")
_UNREACHABLE_RE = re.compile(
    r"Retrying|NewConnectionError|Max retries exceeded|SSLError|CERTIFICATE_VERIFY_FAILED|"
    r"Temporary failure in name resolution|Could not fetch URL"
)


def explain_pip_failure(lines: list[str]) -> tuple[str | None, str]:
    """(package, why) from pip's output, as far as pip said."""
    for index, line in enumerate(lines):
        if "DO NOT MATCH THE HASHES" in line:
            for follow_index in range(index + 1, len(lines)):
                match = _HASH_FAILURE_RE.match(lines[follow_index])
                if match:
                    expected: list[str] = []
                    got = "?"
                    for after in lines[follow_index + 1 : follow_index + 40]:
                        if m := _EXPECTED_RE.match(after):
                            expected.append(m.group("hex"))
                        elif m := _GOT_RE.match(after):
                            got = m.group("hex")
                            break
                    return (
                        match.group("pin"),
                        f"the downloaded file's sha256 is {got}, but the lock allows only "
                        f"{' or '.join(expected) or '?'}: the lock is wrong or the file was "
                        "tampered with",
                    )
    unreachable = [line.strip() for line in lines if _UNREACHABLE_RE.search(line)]
    for line in lines:
        if unreachable and (match := _NOT_FOUND_RE.search(line)):
            return (
                match.group("pin"),
                f"the index could not be reached ({unreachable[-1][:200]}); check pip's index "
                "URL and CA bundle (pip config list) and this machine's network",
            )
        if match := _NOT_FOUND_RE.search(line):
            return (
                match.group("pin"),
                "no wheel of that version for this image's Python and platform on the index "
                "(only wheels are installed)",
            )
    collecting = [m.group("pin") for line in lines if (m := _COLLECTING_RE.match(line))]
    errors = [line.strip() for line in lines if line.startswith("ERROR")]
    why = errors[-1] if errors else (lines[-1].strip() if lines else "pip printed nothing")
    return (collecting[-1] if collecting else None, why)


class PipProgress:
    """pip's milestones, with how many of the locked packages it has reached."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.collected = 0

    def __call__(self, line: str) -> str | None:
        if not line.startswith(_SHOWN_PIP_LINES):
            return None
        if line.startswith("Collecting"):
            self.collected += 1
            percent = 100 * self.collected // max(self.total, 1)
            requirement = line.split(" (from", maxsplit=1)[0]
            return f"[{self.collected}/{self.total} {percent:3d}%] {requirement}"
        return line
