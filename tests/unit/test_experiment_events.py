"""emit_event: one scrubbed JSON line per operation, never on stdout."""

from __future__ import annotations

import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pybox._core.errors import InvalidRequest
from pybox._features.experiments.events import SCRUBBED, emit_event, scrub_fields
from pybox._features.experiments.states import ExperimentState
from pybox._features.experiments.testing.summary import summarize

CREDENTIAL_KEYS = (
    "token",
    "API_TOKEN",
    "secret",
    "client_secret",
    "password",
    "db_passwd",
    "api_key",
    "ApiKey",
    "Authorization",
    "credential",
    "credentials",
    "cookie",
    "Set-Cookie",
    "private_key",
    "dsn",
    "SENTRY_DSN",
)


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_one_json_line_with_the_fixed_fields() -> None:
    out = io.StringIO()
    emit_event(
        out,
        "run_tests",
        experiment_id="exp-1",
        job_id="job-2",
        status="completed",
        duration_s=1.25,
        passed=14,
        state=ExperimentState.COMPLETED,
    )
    assert out.getvalue().count("\n") == 1
    (event,) = lines(out)
    assert event["event"] == "pybox.experiment" and event["operation"] == "run_tests"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(event["ts"]))
    assert event["experiment_id"] == "exp-1" and event["job_id"] == "job-2"
    assert event["status"] == "completed" and event["duration_s"] == 1.25
    assert event["passed"] == 14 and event["state"] == "completed"


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_credential_shaped_keys_are_scrubbed_everywhere(key: str) -> None:
    out = io.StringIO()
    emit_event(
        out,
        "create",
        experiment_id=None,
        job_id=None,
        status="ok",
        duration_s=None,
        **{key: "hunter2"},
        nested={"deeper": [{key: "hunter2", "kept": "visible"}]},
    )
    assert "hunter2" not in out.getvalue()
    (event,) = lines(out)
    assert event[key] == SCRUBBED
    assert event["nested"] == {"deeper": [{key: SCRUBBED, "kept": "visible"}]}


def test_value_objects_are_scrubbed_by_their_fields() -> None:
    @dataclass(frozen=True)
    class Settings:
        name: str
        token: str

    scrubbed = scrub_fields({"settings": Settings("ci", "hunter2"), "items": (Settings("a", "b"),)})
    assert scrubbed == {
        "settings": {"name": "ci", "token": SCRUBBED},
        "items": [{"name": "a", "token": SCRUBBED}],
    }
    summary = summarize("pytest", passed=1, failed=0, skipped=0, errors=0, failing=(), exit_code=0)
    assert scrub_fields({"tests": summary})["tests"]["passed"] == 1


def test_non_json_values_become_strings() -> None:
    scrubbed = scrub_fields(
        {
            "path": Path("/p/x"),
            "data": b"file contents",
            "names": frozenset({"b", "a"}),
            "ratio": float("nan"),
            "deep": [[[[[[[[[["x"]]]]]]]]]],
        }
    )
    assert scrubbed["path"] == "/p/x"
    assert scrubbed["data"] == "<13 bytes>"
    assert scrubbed["names"] == ["a", "b"]
    assert scrubbed["ratio"] == "nan"
    assert "nested too deep" in json.dumps(scrubbed["deep"])
    json.dumps(scrubbed, allow_nan=False)


def test_stdout_is_refused() -> None:
    fd_one = open(1, "w", closefd=False)  # noqa: SIM115 - fd 1 by number, not closed
    for stream in (sys.__stdout__, fd_one):
        assert stream is not None
        with pytest.raises(InvalidRequest, match="never stdout"):
            emit_event(stream, "x", experiment_id=None, job_id=None, status="ok", duration_s=None)


def test_stderr_is_taken_while_the_stdio_server_points_sys_stdout_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdout", err)  # what claim_stdio does (sys.stdout = sys.stderr)
    emit_event(err, "x", experiment_id=None, job_id=None, status="ok", duration_s=None)
    assert json.loads(err.getvalue())["operation"] == "x"


def test_fixed_fields_cannot_be_overridden() -> None:
    with pytest.raises(InvalidRequest, match="ts"):
        emit_event(
            io.StringIO(), "x", experiment_id=None, job_id=None, status="ok", duration_s=None, ts=1
        )


def test_a_broken_stream_never_fails_the_operation() -> None:
    closed = io.StringIO()
    closed.close()
    event = emit_event(closed, "x", experiment_id="e", job_id=None, status="ok", duration_s=0.1)
    assert event["operation"] == "x"


def test_flushes_each_line() -> None:
    class Recorder(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1
            super().flush()

    out = Recorder()
    emit_event(out, "x", experiment_id=None, job_id=None, status="ok", duration_s=None)
    assert out.flushes == 1
