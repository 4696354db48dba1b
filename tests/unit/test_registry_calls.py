"""Registry push and pull on each engine: the query sent and the answer read.

Podman's answers are the ones Podman 4.3.1 gave a loopback registry here
(docs/engines.md, "Registries on Podman")."""

from __future__ import annotations

import pytest

from pybox._core.errors import EngineAPIError, EngineError
from pybox._engine.registry_calls import (
    pull_query,
    pulled_id,
    pushed_digest,
    registry_host,
    tls_query,
)
from tests.unit.test_engine_client import (
    PairTransport,
    chunked_reply,
    engine_on,
    podman_on,
    transport,  # noqa: F401 (a fixture)
)

DIGEST = "sha256:" + "a3" * 32
IMAGE = "544cf84e112e4d43e38de97e122614aad067a5917bd43f157cb40f46b21767ec"


@pytest.mark.parametrize(
    ("repository", "host"),
    [
        ("127.0.0.1:5000/pybox/stdlib", "127.0.0.1"),
        ("127.0.0.1/pybox/stdlib", "127.0.0.1"),
        ("localhost:5000/pybox/stdlib", "localhost"),
        ("[::1]:5000/pybox/stdlib", "::1"),
        ("127.0.0.1.example:5000/pybox/stdlib", "127.0.0.1.example"),
        ("registry.internal/pybox/stdlib", "registry.internal"),
        ("pybox/stdlib", ""),  # no registry part: Docker Hub's naming
        ("stdlib", ""),
    ],
)
def test_the_registry_host_is_read_as_docker_reads_a_reference(repository: str, host: str) -> None:
    assert registry_host(repository) == host


@pytest.mark.parametrize(
    "repository",
    ["127.0.0.1:5000/pybox/x", "127.8.9.10:5000/pybox/x", "localhost:5000/pybox/x", "[::1]:1/x"],
)
def test_tls_verification_is_turned_off_for_a_loopback_registry_only(repository: str) -> None:
    assert tls_query(repository) == {"tlsVerify": "false"}


@pytest.mark.parametrize(
    "repository",
    [
        "127.0.0.1.example:5000/pybox/x",
        "10.0.0.5:5000/pybox/x",
        "registry.internal/pybox/x",
        "pybox/x",
        "localhost.example/pybox/x",
    ],
)
def test_every_other_registry_keeps_tls_verification(repository: str) -> None:
    assert tls_query(repository) == {}


def test_the_pushed_digest_is_read_in_docker_s_form_and_podman_s() -> None:
    assert pushed_digest([{"status": "x"}, {"aux": {"Tag": "t", "Digest": DIGEST}}]) == DIGEST
    podman = [
        {"status": "The push refers to repository [127.0.0.1:45123/pybox/leadreg:t1]"},
        {"status": f"t1: digest: {DIGEST} size: 341"},
    ]
    assert pushed_digest(podman) == DIGEST
    assert pushed_digest([{"status": "digest: sha256:short size: 1"}]) is None


def test_a_pull_asks_for_exactly_the_digest_for_the_platform() -> None:
    query = pull_query("127.0.0.1:5000/pybox/stdlib", DIGEST, "linux/arm64/v8")
    assert query == {
        "reference": f"127.0.0.1:5000/pybox/stdlib@{DIGEST}",
        "os": "linux",
        "arch": "arm64",
        "variant": "v8",
        "policy": "always",
        "tlsVerify": "false",
    }
    assert "tlsVerify" not in pull_query("registry.internal/pybox/stdlib", DIGEST, "linux/amd64")
    with pytest.raises(EngineError, match="not OS/ARCH"):
        pull_query("127.0.0.1:5000/pybox/stdlib", DIGEST, "linux")


def test_podman_s_pull_answer_names_the_image_or_is_an_error() -> None:
    assert pulled_id([{"stream": "Copying"}, {"images": [IMAGE], "id": IMAGE}], "r") == (
        f"sha256:{IMAGE}"
    )
    with pytest.raises(EngineError, match="named no image"):
        pulled_id([{"stream": "Storing signatures\n"}], "r")


def test_docker_s_push_adds_nothing_to_the_query(transport: PairTransport) -> None:  # noqa: F811
    events = [b'{"status":"pushing"}\r\n', b'{"aux":{"Digest":"' + DIGEST.encode() + b'"}}\r\n']
    transport.scripts.append(transport.answer(chunked_reply("200 OK", events)))
    assert engine_on(transport).push_image("127.0.0.1:5000/pybox/x", "t") == DIGEST
    assert "tlsVerify" not in transport.requests[0].line


def test_podman_s_push_to_loopback_turns_off_tls_and_reads_its_digest_line(
    transport: PairTransport,  # noqa: F811
) -> None:
    events = [b'{"status":"t: digest: ' + DIGEST.encode() + b' size: 341"}\n']
    transport.scripts.append(transport.answer(chunked_reply("200 OK", events)))
    assert podman_on(transport).push_image("127.0.0.1:5000/pybox/x", "t") == DIGEST
    line = transport.requests[0].line
    assert "/images/127.0.0.1%3A5000%2Fpybox%2Fx/push?" in line and "tlsVerify=false" in line


def test_podman_s_pull_goes_through_its_own_api(transport: PairTransport) -> None:  # noqa: F811
    events = [b'{"stream":"Copying blob"}\n', b'{"images":["' + IMAGE.encode() + b'"],"id":"']
    events[-1] += IMAGE.encode() + b'"}\n'
    transport.scripts.append(transport.answer(chunked_reply("200 OK", events)))
    podman_on(transport).pull_image("127.0.0.1:5000/pybox/x", DIGEST, "linux/amd64")
    line = transport.requests[0].line
    assert line.startswith("POST /v4.0.0/libpod/images/pull?")
    assert "tlsVerify=false" in line and "policy=always" in line and "%40sha256%3A" in line


def test_podman_s_pull_refused_by_the_registry_is_a_refusal(
    transport: PairTransport,  # noqa: F811
) -> None:
    events = [b'{"stream":"Trying to pull"}\n', b'{"error":"manifest unknown"}\n']
    transport.scripts.append(transport.answer(chunked_reply("200 OK", events)))
    with pytest.raises(EngineAPIError, match="manifest unknown"):
        podman_on(transport).pull_image("127.0.0.1:5000/pybox/x", DIGEST, "linux/amd64")
