"""A commit on Podman: the image configuration as import changes, each refusal,
and the export streamed into the import over `socket.socketpair()`.

`podman_parse` is Podman 4.3's reading of a change (containers/common
`ImageConfigFromChanges`) for the instructions pybox sends, said again in
Python, so the changes are checked by what Podman makes of them.
"""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pybox._core.errors import EngineAPIError, EngineError
from pybox._engine.podman_commit import config_problem, expected_config, import_changes
from pybox._engine.specgen import PodmanUnsupported
from pybox._features.images.builds import _image_config
from pybox._features.images.lock_plans import LockBuildPlan
from tests.unit.test_engine_client import (
    PairTransport,
    chunked_reply,
    podman_on,
    reply,
    transport,  # noqa: F401 (the fixture)
)


def _unquoted(text: str) -> str:
    if text.startswith('"') and text.endswith('"'):
        text = text.removeprefix('"').removesuffix('"')
    return text


def podman_parse(changes: list[str]) -> dict[str, Any]:
    """The configuration Podman 4.3 makes of `changes` (the instructions pybox uses)."""
    config: dict[str, Any] = {"User": "", "WorkingDir": "", "Env": [], "Cmd": [], "Labels": {}}
    for change in changes:
        instruction, _, value = change.partition(" ")
        value = value.strip()
        if instruction == "USER":
            config["User"] = value
        elif instruction == "WORKDIR":
            config["WorkingDir"] = value
        elif instruction == "ENV":
            key, _, val = value.partition("=")
            config["Env"].append(f"{_unquoted(key)}={_unquoted(val)}")
        elif instruction == "CMD":
            config["Cmd"] = json.loads(value)
        elif instruction == "LABEL":
            key, _, val = value.partition("=")
            config["Labels"][_unquoted(key)] = _unquoted(val)
        else:
            raise AssertionError(f"pybox sent an instruction it does not mean to: {change}")
    return config


def lock_image_config() -> dict[str, Any]:
    """The configuration a lock build commits (`builds._image_config` reads the
    plan's name and recipe hash only)."""
    plan = SimpleNamespace(name="tiny", recipe=SimpleNamespace(hash="sha256:" + "cd" * 32))
    return _image_config(cast(LockBuildPlan, plan), "sha256:" + "ab" * 16)


def test_a_lock_image_s_configuration_as_changes() -> None:
    config = lock_image_config()
    changes = import_changes(config)
    assert changes[:2] == ["USER 1000:1000", "WORKDIR /pybox/work"]
    assert 'ENV PATH="/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"' in changes
    assert 'ENV LANG="C.UTF-8"' in changes
    assert 'CMD ["/opt/venv/bin/python3"]' in changes
    assert 'LABEL io.pybox.python="/opt/venv/bin/python3"' in changes
    # The build box's labels, blanked for Docker's merge, are not set at all.
    assert not [c for c in changes if c.startswith("LABEL io.pybox.managed")]
    assert podman_parse(changes) == {
        key: value for key, value in expected_config(config).items() if key != "Entrypoint"
    }
    assert set(podman_parse(changes)["Labels"]) == {
        "io.pybox.image",
        "io.pybox.recipe",
        "io.pybox.python",
        "io.pybox.state",
    }


@pytest.mark.parametrize(
    "value",
    ["two words", ' "quoted" ', 'a"b', '"', '""', "x=y=z", "trailing ", " leading", "", "ünï"],
)
def test_values_come_back_from_podman_as_they_were(value: str) -> None:
    config = {
        "Env": [f"A_B={value}"],
        "Labels": {"io.example.x": value or "-"},
        "Cmd": ["python3", "-c", value],
        "User": "1000:1000",
    }
    parsed = podman_parse(import_changes(config))
    assert parsed["Env"] == [f"A_B={value}"]
    assert parsed["Labels"] == {"io.example.x": value or "-"}
    assert parsed["Cmd"] == ["python3", "-c", value]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"ExposedPorts": {"80/tcp": {}}}, "Config.ExposedPorts"),
        ({"Entrypoint": ["/bin/sh"]}, "Config.Entrypoint"),
        ({"Hostname": "builder"}, "Config.Hostname"),
        ({"Healthcheck": {"Test": ["CMD", "true"]}}, "Config.Healthcheck"),
        ({"User": "1000\n"}, "Config.User"),
        ({"User": " 1000"}, "Config.User"),
        ({"User": 1000}, "Config.User"),
        ({"WorkingDir": "work"}, "Config.WorkingDir"),
        ({"WorkingDir": "/a/../b"}, "Config.WorkingDir"),
        ({"WorkingDir": "//a"}, "Config.WorkingDir"),
        ({"Env": ["NOVALUE"]}, "Config.Env"),
        ({"Env": ["A B=1"]}, "Config.Env"),
        ({"Env": ["A=line\nbreak"]}, "Config.Env"),
        ({"Env": "A=1"}, "Config.Env"),
        ({"Cmd": "python3"}, "Config.Cmd"),
        ({"Cmd": []}, "Config.Cmd"),
        ({"Cmd": ["python3", 1]}, "Config.Cmd"),
        ({"Labels": {"a=b": "1"}}, "Config.Labels"),
        ({"Labels": {'"a"': "1"}}, "Config.Labels"),
        ({"Labels": {"a": "new\nline"}}, "Config.Labels[a]"),
        ({"Labels": ["a=b"]}, "Config.Labels"),
    ],
)
def test_what_a_change_cannot_say_is_refused_naming_the_field(
    config: dict[str, Any], field: str
) -> None:
    with pytest.raises(PodmanUnsupported) as refused:
        import_changes(config)
    assert refused.value.field == field
    assert "refuses the image rather than make it weaker" in str(refused.value)


def test_what_an_import_starts_with_needs_no_change() -> None:
    config = {"Entrypoint": None, "Hostname": "", "Healthcheck": {"Test": ["NONE"]}}
    assert import_changes(config) == []
    assert import_changes({"Labels": {"io.pybox.managed": ""}}) == []


READ_BACK: dict[str, Any] = {
    "User": "1000:1000",
    "WorkingDir": "/pybox/work",
    "Env": ["PATH=/opt/venv/bin:/usr/bin", "LANG=C.UTF-8"],
    "Cmd": ["/opt/venv/bin/python3"],
    "Entrypoint": None,
    "Labels": {"io.pybox.image": "tiny"},
}
ASKED: dict[str, Any] = {
    **READ_BACK,
    "Hostname": "",
    "Labels": {"io.pybox.image": "tiny", "io.pybox.managed": ""},
}


def test_the_imported_image_is_read_back_field_by_field() -> None:
    assert config_problem(ASKED, {"Config": READ_BACK}) is None
    assert config_problem(ASKED, None) == "the engine has no such image after the import"
    for key, wrong in [
        ("User", "0:0"),
        ("WorkingDir", "/"),
        ("Env", [*READ_BACK["Env"], "HOME=/root"]),
        ("Cmd", ["/bin/sh"]),
        ("Entrypoint", ["/bin/sh"]),
        ("Labels", {"io.pybox.image": "tiny", "io.pybox.managed": "1"}),
        ("Healthcheck", {"Test": ["CMD", "true"]}),
    ]:
        problem = config_problem(ASKED, {"Config": {**READ_BACK, key: wrong}})
        assert problem is not None and problem.startswith(f"Config.{key} reads back as"), key


# -- the commit over the wire ---------------------------------------------------

IMAGE_ID = "sha256:" + "fe" * 32
TAR = b"".join(bytes([n]) * 70000 for n in range(1, 6))  # 350000 bytes, several pieces
CONFIG = {**ASKED, "Labels": {"io.pybox.image": "tiny"}}


def inspect_answer(config: dict[str, Any], tags: list[str]) -> bytes:
    body = {"Id": IMAGE_ID, "RepoTags": tags, "Config": config}
    return reply("200 OK", json.dumps(body).encode(), content_type="application/json")


def import_script(pair: PairTransport) -> Any:
    progress = [b'{"status":"Importing"}\r\n', f'{{"status":"{IMAGE_ID}"}}\r\n'.encode()]
    return pair.answer(chunked_reply("200 OK", progress))


def export_script(pair: PairTransport, pieces: list[bytes], *, cut: bool = False) -> Any:
    """The export's answer; `cut`: the client stops reading it (a broken pipe here)."""
    answer = pair.answer(chunked_reply("200 OK", pieces))
    if not cut:
        return answer

    def script(server: socket.socket) -> None:
        try:
            answer(server)
        except (BrokenPipeError, ConnectionResetError):
            pass

    return script


def cut_short_import(pair: PairTransport, seen: list[bytes]) -> Any:
    """The import's end of a connection the client drops before its body ends."""

    def script(server: socket.socket) -> None:
        data = b""
        while chunk := server.recv(65536):
            data += chunk
        seen.append(data)

    return script


def test_a_commit_streams_the_export_into_the_import_then_reads_it_back(
    transport: PairTransport,  # noqa: F811
) -> None:
    transport.scripts += [
        import_script(transport),
        export_script(transport, [TAR[:100000], TAR[100000:]]),
        transport.answer(reply("201 Created", b"\n")),  # the tag
        transport.answer(inspect_answer(READ_BACK, ["docker.io/pybox/tiny:latest", "t1"])),
        transport.answer(reply("200 OK", b'[{"Untagged":"docker.io/pybox/tiny:latest"}]')),
        transport.answer(inspect_answer(READ_BACK, ["docker.io/pybox/tiny:t1"])),
    ]
    assert podman_on(transport).commit("c0ffee", "pybox/tiny", "t1", CONFIG) == IMAGE_ID
    # The export is asked for while the import is under way: its request is read first.
    exported, imported, tagged, _, untagged, _ = transport.requests
    assert imported.line.startswith("POST /v1.41/images/create?fromSrc=-&repo=pybox%2Ftiny&tag=t1")
    assert imported.body == TAR
    assert imported.headers["transfer-encoding"] == "chunked"
    assert "changes=USER+1000%3A1000" in imported.line
    assert "changes=LABEL+io.pybox.image%3D%22tiny%22" in imported.line
    assert exported.line == "GET /v1.41/containers/c0ffee/export HTTP/1.1"
    assert tagged.line.startswith(f"POST /v1.41/images/{IMAGE_ID.replace(':', '%3A')}/tag?")
    assert untagged.line.startswith("DELETE /v1.41/images/docker.io%2Fpybox%2Ftiny%3Alatest?")


def test_an_image_that_reads_back_otherwise_is_removed_and_refused(
    transport: PairTransport,  # noqa: F811
) -> None:
    kept_box_user = {**READ_BACK, "User": "0:0"}
    transport.scripts += [
        import_script(transport),
        export_script(transport, [TAR]),
        transport.answer(reply("201 Created", b"\n")),
        transport.answer(inspect_answer(kept_box_user, ["docker.io/pybox/tiny:t1"])),
        transport.answer(inspect_answer(kept_box_user, ["docker.io/pybox/tiny:t1"])),
        transport.answer(reply("200 OK", b"[]")),
    ]
    with pytest.raises(EngineError, match=r"Config\.User reads back as '0:0'.*image was removed"):
        podman_on(transport).commit("c0ffee", "pybox/tiny", "t1", CONFIG)
    assert transport.requests[-1].line.startswith(
        f"DELETE /v1.41/images/{IMAGE_ID.replace(':', '%3A')}?"
    )


def test_an_export_past_the_ceiling_cuts_the_import_short(
    transport: PairTransport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("pybox._engine.podman_commit.EXPORT_MAX_BYTES", 150000)
    seen: list[bytes] = []
    transport.scripts += [
        cut_short_import(transport, seen),
        export_script(transport, [TAR[:100000], TAR[100000:]], cut=True),
    ]
    with pytest.raises(EngineError, match=r"larger than 150000 bytes .* no image was made"):
        podman_on(transport).commit("c0ffee", "pybox/tiny", "t1", CONFIG)
    for thread in transport.threads:
        thread.join(5.0)
    # What the import received ends inside its body: no last chunk, so no image.
    assert not seen[0].endswith(b"0\r\n\r\n")
    assert TAR[:100000] in seen[0]


def test_a_refused_export_cuts_the_import_short(transport: PairTransport) -> None:  # noqa: F811
    seen: list[bytes] = []
    transport.scripts += [
        cut_short_import(transport, seen),
        transport.answer(reply("404 Not Found", b'{"message":"no such container"}')),
    ]
    with pytest.raises(EngineAPIError, match="no such container") as refused:
        podman_on(transport).commit("c0ffee", "pybox/tiny", "t1", CONFIG)
    assert refused.value.status == 404
    for thread in transport.threads:
        thread.join(5.0)
    assert not seen[0].endswith(b"0\r\n\r\n")


def test_an_unsayable_configuration_is_refused_before_any_call() -> None:
    nothing = PairTransport([])
    with pytest.raises(PodmanUnsupported, match=r"Config\.Entrypoint"):
        podman_on(nothing).commit("c0ffee", "pybox/tiny", "t1", {"Entrypoint": ["/bin/sh"]})
    assert nothing.requests == []


def test_a_plain_import_is_tagged_as_asked(transport: PairTransport) -> None:  # noqa: F811
    transport.scripts += [
        import_script(transport),
        transport.answer(reply("201 Created", b"\n")),
        transport.answer(inspect_answer(READ_BACK, ["docker.io/pybox/tiny:t1"])),
    ]
    podman_on(transport).import_image(iter([TAR]), "pybox/tiny", "t1", [])
    assert len(transport.requests) == 3  # nothing named latest: nothing untagged


def test_an_export_past_its_deadline_cuts_the_import_short(
    transport: PairTransport,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("pybox._engine.podman_commit.EXPORT_DEADLINE_S", 0.0)
    seen: list[bytes] = []
    transport.scripts += [
        cut_short_import(transport, seen),
        export_script(transport, [TAR[:100000], TAR[100000:]], cut=True),
    ]
    with pytest.raises(EngineError, match=r"did not finish the export of c0ffee.* within 0 s"):
        podman_on(transport).commit("c0ffee", "pybox/tiny", "t1", CONFIG)
    for thread in transport.threads:
        thread.join(5.0)
    assert not seen[0].endswith(b"0\r\n\r\n")
