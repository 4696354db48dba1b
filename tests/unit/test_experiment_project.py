"""Where a project may come from, and which names are secret-shaped."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._core.errors import ProjectRefused, RequestRejected
from pybox._features.experiments.project import ProjectPolicy, check_project_path
from pybox._features.experiments.secrets import secret_reason


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home" / "me"
    (home / "src" / "proj").mkdir(parents=True)
    return home


def policy(*roots: Path) -> ProjectPolicy:
    return ProjectPolicy(allowed_roots=roots)


def test_a_project_under_an_allowed_root_is_resolved(home: Path) -> None:
    project = home / "src" / "proj"
    assert check_project_path(str(project), policy(home / "src"), home) == project
    assert check_project_path(project, policy(project), home) == project
    assert check_project_path("~/src/proj", policy(home), home) == project


def test_no_allowed_root_names_the_flag() -> None:
    with pytest.raises(ProjectRefused, match="--project-root DIR") as caught:
        check_project_path("/srv/app", ProjectPolicy(), Path("/nonexistent-home"))
    assert isinstance(caught.value, RequestRejected)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "not int"),
        ("", "empty"),
        ("relative/path", "is relative"),
        ("/no/such/folder/anywhere", "does not exist"),
        ("/tmp\n/x", "control characters"),
    ],
)
def test_malformed_paths_are_refused(value: object, message: str, home: Path) -> None:
    with pytest.raises(ProjectRefused, match=message):
        check_project_path(value, policy(home), home)


def test_a_file_is_not_a_project(home: Path) -> None:
    (home / "src" / "file.txt").write_text("x")
    with pytest.raises(ProjectRefused, match="not a folder"):
        check_project_path(str(home / "src" / "file.txt"), policy(home), home)


def test_outside_every_root_is_refused_after_resolving_links(home: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (home / "src" / "sneaky").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ProjectRefused, match=r"resolved.*not under an allowed project root"):
        check_project_path(str(home / "src" / "sneaky"), policy(home / "src"), home)


def test_a_root_given_through_a_link_still_allows_its_projects(home: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(home / "src")
    assert check_project_path(str(home / "src" / "proj"), policy(tmp_path / "root-link"), home)


def test_the_home_folder_and_what_holds_it_are_refused(home: Path) -> None:
    with pytest.raises(ProjectRefused, match="the home folder itself"):
        check_project_path(str(home), policy(home), home)
    with pytest.raises(ProjectRefused, match="holds the home folder"):
        check_project_path(str(home.parent), policy(home.parent.parent), home)


@pytest.mark.parametrize("place", [".ssh", ".aws", ".gnupg", ".kube", ".docker", ".config/gcloud"])
def test_credential_folders_are_refused_even_under_a_root(place: str, home: Path) -> None:
    (home / place / "inner").mkdir(parents=True)
    for path in (home / place, home / place / "inner"):
        with pytest.raises(ProjectRefused, match="credential folder"):
            check_project_path(str(path), policy(home), home)


@pytest.mark.parametrize("place", ["/", "/etc", "/usr/lib", "/proc/self", "/var", "/tmp"])
def test_system_folders_are_refused_even_when_allowed(place: str, home: Path) -> None:
    with pytest.raises(ProjectRefused, match=r"root folder|system folder"):
        check_project_path(place, policy(Path("/")), home)


def test_inside_a_shared_top_is_allowed_under_a_root(tmp_path: Path) -> None:
    # tmp_path lies under /tmp: the top itself is refused, a folder in it is not.
    assert check_project_path(str(tmp_path), policy(Path("/tmp")), Path("/nonexistent-home"))


@pytest.mark.parametrize(
    ("parts", "is_folder", "pattern"),
    [
        ((".env",), False, ".env*"),
        ((".envrc",), False, ".env*"),
        (("config", ".env.production"), False, ".env*"),
        (("prod.env",), False, "*.env"),
        ((".ENV",), False, ".env*"),
        (("tls", "server.pem"), False, "*.pem"),
        (("a.key",), False, "*.key"),
        (("store.p12",), False, "*.p12"),
        (("id_ed25519.pub",), False, "id_ed25519*"),
        ((".netrc",), False, ".netrc"),
        ((".git-credentials",), False, ".git-credentials"),
        (("deploy", "service-account-prod.json"), False, "service-account*.json"),
        (("credentials.json",), False, "credentials.json"),
        (("infra", "terraform.tfstate"), False, "*.tfstate"),
        ((".docker", "config.json"), False, ".docker/config.json"),
        ((".ssh",), True, ".ssh/"),
        ((".aws", "credentials"), False, ".aws/"),
        ((".env",), True, ".env*"),
    ],
)
def test_secret_shaped_names(parts: tuple[str, ...], is_folder: bool, pattern: str) -> None:
    reason = secret_reason(parts, is_folder)
    assert reason is not None and pattern in reason


@pytest.mark.parametrize(
    ("parts", "is_folder"),
    [
        (("app.py",), False),
        (("environment.yml",), False),
        (("credentials",), True),  # a package folder, not a login file
        (("keys", "README.md"), False),
        (("docs", "config.json"), False),
        (("monkey.py",), False),
    ],
)
def test_ordinary_names_are_not_secret(parts: tuple[str, ...], is_folder: bool) -> None:
    assert secret_reason(parts, is_folder) is None


@pytest.mark.parametrize(
    ("parts", "rule"),
    [
        ((".cargo", "credentials.toml"), "credentials.toml"),
        ((".cargo", "credentials"), ".cargo/credentials"),
        ((".config", "gh", "hosts.yml"), "gh/hosts.yml"),
        (("application_default_credentials.json",), "application_default_credentials.json"),
        ((".my.cnf",), ".my.cnf"),
        ((".mylogin.cnf",), ".mylogin.cnf"),
        (("deploy_key",), "*deploy_key"),
        (("ci", "github_deploy_key"), "*deploy_key"),
        (("keys", "github_rsa"), "*_rsa"),
        (("deploy_ed25519",), "*_ed25519"),
        ((".gem", "credentials"), ".gem/credentials"),
    ],
)
def test_more_credential_files_are_secret_shaped(parts: tuple[str, ...], rule: str) -> None:
    reason = secret_reason(parts, False)
    assert reason is not None and rule in reason


def test_the_gcloud_folder_under_config_is_a_credential_folder() -> None:
    assert "gcloud" in (secret_reason((".config", "gcloud"), True) or "")
    assert secret_reason((".config", "gcloud", "configurations", "config_default"), False)
    assert secret_reason(("src", "gcloud"), True) is None  # a package of that name is code


@pytest.mark.parametrize(
    "name",
    [
        ".env~", ".env.swp", ".env.swo", "..env.swp", ".#.env", "#.env#", ".env.bak",
        ".env.orig", ".env.~1~", "id_rsa~", ".id_rsa.swp", "credentials.json.bak",
        "#credentials.json#", ".pgpass.swp", "secrets.yaml.old", ".netrc.swp~",
    ],
)  # fmt: skip
def test_editor_backups_of_secret_names_are_secret_shaped(name: str) -> None:
    reason = secret_reason((name,), False)
    assert reason is not None and reason.startswith("secret-shaped file name")


@pytest.mark.parametrize(
    "name", ["main.py~", ".main.py.swp", "#notes.md#", "README.bak", "deploy_keys.py", "rsa.py"]
)
def test_backups_of_ordinary_names_are_not_secret(name: str) -> None:
    assert secret_reason((name,), False) is None
