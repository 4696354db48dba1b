"""Network modes: the policy, the machine's registry configuration, the posture
rows, the proxy log's reading and the receipt (the proxy itself: test_egress_proxy)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.confinement import seccomp_profile
from pybox._adapters.egress_config import machine_registries, url_host
from pybox._adapters.state import StateStore
from pybox._boxes.egress import EgressNetwork
from pybox._core.egress import (
    CA_BUNDLE_NAME,
    EgressObserved,
    EgressPlan,
    EgressSettings,
    HostReached,
    ProxySpec,
    ProxyTally,
    choose_mode,
    host_problem,
    network_body,
    network_problems,
    newest_tally,
    observed_between,
    parse_tally,
    proxy_box,
)
from pybox._core.errors import ConfigError, EgressRefused, InvalidRequest
from pybox._core.receipt import Unknown
from pybox._core.request import RunRequest
from pybox._core.seal import check_requirements
from pybox._core.seccomp import Confinement
from pybox._engine.docker_seal import DOCKER_SEAL, body_from
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.seal_helpers import requirements
from tests.unit.test_posture import SPEC

DOCS = Path(__file__).resolve().parents[2] / "docs"


# -- policy -----------------------------------------------------------------------------


def test_none_is_the_default_and_always_allowed() -> None:
    assert choose_mode(None, EgressSettings(modes=())) == "none"
    assert choose_mode("none", EgressSettings(modes=())) == "none"


def test_more_than_allowed_is_refused_by_name_never_narrowed() -> None:
    with pytest.raises(EgressRefused, match=r"'open' is not allowed .*allowed: none, packages"):
        choose_mode("open", EgressSettings())
    with pytest.raises(EgressRefused, match=r"allowed: none\)"):
        choose_mode("packages", EgressSettings(modes=("none",)))
    with pytest.raises(InvalidRequest, match="one of none, packages, open"):
        choose_mode("internet", EgressSettings())


def test_a_refused_mode_creates_nothing(engine: FakeEngine, state: StateStore) -> None:
    session = make_session(engine, state)
    with pytest.raises(EgressRefused):
        session.run(RunRequest(code=b"print(1)", egress="open"))
    with pytest.raises(EgressRefused):
        session.sandboxes().create(egress="open")
    assert "create" not in [name for name, _ in engine.calls]


def test_the_operator_config_section(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[egress]\nmodes = ["none", "packages", "open"]\n'
        'allow_hosts = ["Registry.Example.", "pkgs.example"]\nprivate_addresses = true\n'
    )
    settings = load_settings({"PYBOX_CONFIG": str(config)}).egress
    assert settings.modes == ("none", "packages", "open")
    assert settings.allow_hosts == ("registry.example", "pkgs.example")
    assert settings.private_addresses is True


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allow_hosts": ["10.0.0.1"]}, "an address"),
        ({"allow_hosts": ["[::1]"]}, "an address"),
        ({"allow_hosts": ["*.example"]}, "a-z, 0-9"),
        ({"allow_hosts": ["r\u00e9gistry.example"]}, "not ASCII"),
        ({"allow_hosts": ["a..b"]}, "label"),
        ({"allow_hosts": ["0x7f.1"]}, "number"),
        ({"allow_hosts": "registry.example"}, "list of strings"),
        ({"modes": ["all"]}, "known: none, packages, open"),
        ({"private_addresses": "yes"}, "true or false"),
        ({"proxy": "x"}, "unknown egress setting proxy"),
    ],
)
def test_bad_operator_settings_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EgressSettings().with_settings(values, "config.toml")


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("registry.example", True),
        ("xn--bcher-kva.example", True),
        ("localhost", True),  # a name: the proxy then refuses its loopback address
        ("127.0.0.1", False),
        ("2130706433", False),
        ("-bad.example", False),
        ("a" * 64 + ".example", False),
    ],
)
def test_host_problem(name: str, ok: bool) -> None:
    assert (host_problem(name) is None) == ok


# -- the machine's pip and npm configuration ----------------------------------------------


def test_registries_come_from_the_real_files(tmp_path: Path) -> None:
    system, home = tmp_path / "sys", tmp_path / "home"
    (system / "etc").mkdir(parents=True)
    (home / ".config" / "pip").mkdir(parents=True)
    (system / "etc" / "pip.conf").write_text(
        "[global]\nindex-url = https://Index.Example/simple\ncert = /etc/ca.pem\n"
    )
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[install]\nextra-index-url =\n    https://extra.example/simple\n"
        "    http://plain.example/simple\n    https://odd.example:8443/simple\n"
        "    file:///opt/wheels\n"
    )
    (home / ".npmrc").write_text(
        "registry=https://npm.example/\n@corp:registry=https://corp.example/npm/\n"
        "; registry=https://commented.example/\nfund=false\n"
    )
    found = machine_registries(
        {"HOME": str(home), "PIP_EXTRA_INDEX_URL": "https://env.example/simple"},
        home,
        system,
    )
    assert found.hosts == (
        "index.example",
        "extra.example",
        "env.example",
        "npm.example",
        "corp.example",
    )
    assert [line.split(" ")[0] for line in found.skipped] == [
        "http://plain.example/simple",
        "https://odd.example:8443/simple",
        "file:///opt/wheels",
    ]
    assert found.ca_bundle == "/etc/ca.pem"
    assert found.upstream is None


def test_an_upstream_proxy_is_read_and_an_authenticated_one_is_not_chained(
    tmp_path: Path,
) -> None:
    plain = machine_registries({"HTTPS_PROXY": "http://proxy.internal:3128"}, tmp_path, tmp_path)
    assert plain.upstream == ("proxy.internal", 3128)
    secret = machine_registries({"HTTPS_PROXY": "http://u:p@proxy:3128"}, tmp_path, tmp_path)
    assert secret.upstream is None


def test_url_host() -> None:
    assert url_host("https://registry.example/simple/") == ("registry.example", "")
    assert url_host("https://10.0.0.1/simple")[0] is None
    assert url_host("https://registry.example:443/x")[0] == "registry.example"


# -- posture -------------------------------------------------------------------------------

PLAN = EgressPlan("packages", "pybox-egress-abc", "172.30.0.2", ("registry.example",), True)


def network_requirements(plan: EgressPlan) -> tuple[Any, ...]:
    """A run box's network rows, as the Docker backend sets and reads them."""
    spec = replace(SPEC, egress=plan)
    return tuple(
        r
        for r in requirements(spec)
        if r.name
        in {
            "Config.NetworkDisabled",
            "HostConfig.NetworkMode",
            "HostConfig.ExtraHosts",
            "HostConfig.Dns",
            "HostsPath",
            "ResolvConfPath",
            "NetworkSettings.Networks",
        }
    )


def test_none_keeps_todays_rows() -> None:
    names = [r.name for r in network_requirements(EgressPlan())]
    assert names == [
        "Config.NetworkDisabled",
        "HostConfig.NetworkMode",
        "HostConfig.ExtraHosts",
        "HostConfig.Dns",
        "HostsPath",
        "ResolvConfPath",
    ]


def test_packages_box_must_be_on_exactly_its_own_network() -> None:
    table = network_requirements(PLAN)
    good = {
        "Config": {},
        "HostConfig": {"NetworkMode": "pybox-egress-abc"},
        "NetworkSettings": {"Networks": {"pybox-egress-abc": {}}},
    }
    assert check_requirements(table, good).ok
    bridged = json.loads(json.dumps(good))
    bridged["NetworkSettings"]["Networks"]["bridge"] = {}
    assert not check_requirements(table, bridged).ok
    other = json.loads(json.dumps(good))
    other["HostConfig"]["NetworkMode"] = "bridge"
    assert not check_requirements(table, other).ok


def test_the_packages_network_is_internal_and_gives_the_host_no_address() -> None:
    labels = {"io.pybox.egress": "packages"}
    body = network_body("packages", labels)
    assert body["Internal"] is True
    assert body["Options"]["com.docker.network.bridge.inhibit_ipv4"] == "true"
    read_back = {**body, "Labels": labels}
    assert network_problems(read_back, "packages", labels) == []
    weakened = {**read_back, "Internal": False, "Options": {}}
    assert len(network_problems(weakened, "packages", labels)) == 2
    assert network_body("open", labels)["Internal"] is False


def test_the_box_environment_points_at_the_proxy_and_the_ca_bundle() -> None:
    env = PLAN.environment("/pybox/input")
    assert env["HTTPS_PROXY"] == env["npm_config_proxy"] == "http://172.30.0.2:3128"
    assert env["SSL_CERT_FILE"] == env["PIP_CERT"] == f"/pybox/input/{CA_BUNDLE_NAME}"
    assert env["NODE_EXTRA_CA_CERTS"] == env["SSL_CERT_FILE"]
    assert EgressPlan().environment("/pybox/input") == {}


# -- the proxy's log -----------------------------------------------------------------------


def tally_line(t: float, **fields: Any) -> str:
    base = {"reached": [], "refused": [], "refused_total": 0, "refused_dropped": 0}
    return json.dumps({"seq": 1, "t": t, "event": "tally", **base, **fields})


def test_the_newest_tally_after_the_ask_is_read() -> None:
    lines = [
        '{"seq": 1, "t": 4.0, "event": "listening", "port": 3128}',
        tally_line(5.0, refused_total=1),
        "not json",
        tally_line(10.5, refused_total=3),
        tally_line(11.0, refused_total=4, reached=[["b.example", 443, 2, 2, 11, 102]]),
        '{"event": "tally", "t": 12.0, "reached": "no"}',  # misshapen: never read
    ]
    assert newest_tally(lines[:2], asked_at=10.0) is None  # not answered yet
    tally = newest_tally(lines, asked_at=10.0)
    assert tally is not None and tally.refused_total == 4
    assert tally.reached == (("b.example", 443, 2, 2, 11, 102),)
    assert parse_tally(lines[-1]) is None


def test_a_run_is_the_difference_between_two_tallies() -> None:
    before = ProxyTally(1.0, (("a.example", 443, 3, 3, 30, 300),), (("x.invalid", 2),), 2)
    after = ProxyTally(
        2.0,
        (("a.example", 443, 4, 4, 31, 310), ("b.example", 443, 0, 0, 0, 0)),
        (("x.invalid", 3), ("y.invalid", 1)),
        5,
    )
    seen, gaps = observed_between("packages", before, after)
    assert seen.hosts == (HostReached("a.example", 443, 1, 1, 10),)
    assert (seen.refused, seen.refused_names) == (3, ("x.invalid", "y.invalid"))
    assert gaps == ()
    whole, _ = observed_between("packages", None, after)  # one-shot: since the proxy began
    assert whole.hosts == (HostReached("a.example", 443, 4, 31, 310),)


def test_refused_names_past_the_proxys_bound_are_an_unknown_never_silence() -> None:
    after = ProxyTally(
        2.0,
        (("a.example", 443, 1, 1, 5, 5000),),
        tuple((f"n{i}.invalid", 1) for i in range(256)),
        35_000,
        34_744,
        256,
        in_flight=1,
    )
    seen, gaps = observed_between("packages", None, after)
    assert seen.hosts == (HostReached("a.example", 443, 1, 5, 5000),)
    assert seen.refused == 35_000 and len(seen.refused_names) == 20
    assert [gap.fact for gap in gaps] == [
        "the names of some requests the egress proxy refused",
        "the bytes of egress connections still open",
    ]
    assert "34744 of the 35000 refused requests" in gaps[0].reason


class ProxyEngine(FakeEngine):
    """A fake engine holding one running proxy that answers each USR1 with a tally."""

    def __init__(self, answers: list[str]) -> None:
        super().__init__()
        self.answers = answers
        self.log: list[str] = []
        self.signals: list[str] = []

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool:
        self.signals.append(signal)
        if not self.answers:
            return False  # the proxy is gone
        self.log.append(self.answers.pop(0).replace('"t": 0', f'"t": {time.time() + 0.01}'))
        return True

    def container_stdout(self, container_id: str, since_epoch: int = 0) -> bytes:
        return "\n".join(self.log).encode()

    def create_network(self, name: str, body: dict[str, Any]) -> str:
        raise AssertionError("never asked")

    def inspect_network(self, network: str) -> dict[str, Any] | None:
        return None

    def remove_network(self, network: str) -> bool:
        return False

    def list_networks(self, labels: Mapping[str, str | None]) -> list[dict[str, Any]]:
        return []

    def connect_network(self, network: str, container_id: str) -> None:
        raise AssertionError("never asked")


def proxy_of(engine: ProxyEngine, state: StateStore) -> EgressNetwork:
    record = {"mode": "packages", "network": "n", "proxy_id": "proxy", "hosts": ["a.example"]}
    return EgressNetwork.from_record(make_session(engine, state).box_context(), "sb", record)


def test_the_receipt_says_unknown_when_refused_names_were_dropped(state: StateStore) -> None:
    flooded = tally_line(
        0,
        reached=[["a.example", 443, 1, 1, 5, 5000]],
        refused=[["n0.invalid", 1]],
        refused_total=40_000,
        refused_dropped=39_999,
        refused_names_max=1,
    )
    engine = ProxyEngine([flooded])
    unknown: list[Unknown] = []
    seen = proxy_of(engine, state).observed_or_unknown(None, unknown)
    assert engine.signals == ["USR1"]  # asked, never killed
    assert seen.hosts == (HostReached("a.example", 443, 1, 5, 5000),)
    assert seen.refused == 40_000
    (gap,) = unknown
    assert "refused" in gap.fact and "39999 of the 40000" in gap.reason


def test_a_proxy_that_can_not_answer_is_an_unknown_not_an_empty_list(
    state: StateStore,
) -> None:
    unknown: list[Unknown] = []
    seen = proxy_of(ProxyEngine([]), state).observed_or_unknown(None, unknown)
    assert seen.hosts == ()
    assert [u.fact for u in unknown] == ["the hosts reached through the egress proxy"]
    assert "no longer running" in unknown[0].reason
    before: list[Unknown] = []
    assert proxy_of(ProxyEngine([]), state).tally_or_unknown(before) is None
    assert "since it was made" in before[0].reason  # a sandbox run: what it shows


def test_a_proxy_waits_for_its_connections_then_reads_the_whole_run(
    state: StateStore,
) -> None:
    busy = tally_line(0, in_flight=1)
    done = tally_line(0, reached=[["a.example", 443, 1, 1, 5, 50]])
    unknown: list[Unknown] = []
    seen = proxy_of(ProxyEngine([busy, done]), state).observed_or_unknown(None, unknown)
    assert seen.hosts == (HostReached("a.example", 443, 1, 5, 50),) and unknown == []


# -- the proxy container's posture ------------------------------------------------------


def proxy_table() -> tuple[Any, ...]:
    spec = ProxySpec(
        image_id="sha256:x",
        entrypoint=("python3", "-I", "-S", "-c", "pass", "{}"),
        user="1600000001:1600000001",
        labels=(("io.pybox.egress", "packages"),),
        network="pybox-egress-x",
        confinement=Confinement(seccomp_profile(), None, "no AppArmor (test)"),
    )
    return DOCKER_SEAL.requirements(proxy_box(spec))


def test_the_proxy_has_a_boxs_ulimits_and_no_dev_shm() -> None:
    table = proxy_table()
    body = body_from(table)["HostConfig"]
    assert body["IpcMode"] == "none"  # no /dev/shm at all: nothing writable
    assert {u["Name"]: u["Hard"] for u in body["Ulimits"]} == {
        "nofile": 256,
        "core": 0,
        "nproc": 64,
    }
    inspected = {"Config": {}, "HostConfig": dict(body)}
    weakened = {**inspected, "HostConfig": {**body, "IpcMode": "private", "Ulimits": None}}
    fields = {m.field for m in check_requirements(table, weakened).mismatches}
    assert {"HostConfig.IpcMode", "HostConfig.Ulimits"} <= fields


def test_a_receipt_with_hosts_matches_the_schema(engine: FakeEngine, state: StateStore) -> None:
    engine.script = Script(stdout=b"ok\n")
    receipt = make_session(engine, state).run(RunRequest(code=b"print(1)")).receipt
    seen = EgressObserved("packages", (HostReached("registry.example", 443, 1, 5, 6),), 1, ("x",))
    receipt = replace(
        receipt,
        configured=replace(receipt.configured, network="packages"),
        observed_by_pybox=replace(receipt.observed_by_pybox, egress=seen),
    )
    schema = json.loads((DOCS / "receipt.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(receipt.to_dict())
    assert any("registry.example:443" in line for line in receipt.summary_lines())
    opened = replace(receipt, configured=replace(receipt.configured, network="open"))
    assert opened.summary_lines()[0].startswith("pybox: [network open: general egress]")
