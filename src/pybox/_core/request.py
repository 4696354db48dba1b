"""A run request and its validation (pure). Bad input changes nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pybox._core.display import name_problem
from pybox._core.errors import InvalidRequest
from pybox._core.images import ImageRecord, check_image_name
from pybox._core.limits import LimitRequest, Limits
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice

CODE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py")
MAX_NAME_BYTES = 255
MAX_INPUTS = 1000
# The program's own arguments and environment variables: bounded well inside
# what the kernel takes for one execve (each string at most 128 KiB there).
MAX_ARGS = 1000
MAX_ARGS_BYTES = 128 * 1024
MAX_ENV = 200
MAX_ENV_BYTES = 128 * 1024
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Whose program a request runs (the receipt's `configured.program.kind`). The
# caller's code starts as `python NAME`, site and all: it sees the sandbox's
# installed libraries. pybox's own in-box programs (the file tools, and the
# wrapper that becomes an `exec`'s command) start isolated, `python -I -S NAME`:
# nothing a program left in the workspace (a user site under HOME=/pybox/work,
# a `.pth`, a module beside the script) or any PYTHON* variable runs in them.
PROGRAM_CALLER = "caller"
PROGRAM_FILES = "pybox_files"
PROGRAM_EXEC = "pybox_exec"
PROGRAM_KINDS = (PROGRAM_CALLER, PROGRAM_FILES, PROGRAM_EXEC)
ISOLATED_FLAGS = ("-I", "-S")
# Names that usually hold a credential. The program is untrusted: such a
# variable is refused unless the operator allows it (allow_credential_env).
# Most words match anywhere in the name; the short ones only as a whole
# `_`-separated word, so `BYPASS`, `PASSTHROUGH`, `COMPASS` and `PATH` pass.
# `PWD` counts only beside another word (`MYSQL_PWD`, `PWD_FILE`): the shell's
# own `PWD` (and `OLDPWD`) is a folder, not a password.
CREDENTIAL_NAME_RE = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE"
    r"|CERT|DSN|JWT|BEARER|DATABASE_URL|CONNECTION_STRING"
    r"|(?:^|_)(?:PASS|PAT)(?:_|$)|_PWD(?:_|$)|^PWD_"
    r"|^(AWS|AZURE|GCP|GOOGLE|GITHUB|GH|GITLAB|OPENAI|ANTHROPIC|HF|HUGGINGFACE|SLACK|STRIPE"
    r"|NPM|PYPI|TWINE|DOCKER|KUBE|VAULT|SSH|GPG)_",
    re.IGNORECASE,
)
# A URL's user part in a value: `scheme://USERINFO@host`. It is a credential
# when it holds a password (`user:password@`, `:password@`), or is long enough
# to be a token in the user's place (`https://<token>@host`); `ssh://git@host`
# is not. Found with str.find, never a backtracking pattern: values are up to
# 128 KiB and come from the caller.
_AUTHORITY_RE = re.compile(r"[^/?#\s]*")
TOKEN_USER_CHARS = 20


def value_has_url_credentials(value: str) -> bool:
    """Whether `value` holds a URL with a password or a token in its user part."""
    found = value.find("://")
    while found != -1:
        start = found + 3
        authority = _AUTHORITY_RE.match(value, start)
        end = authority.end() if authority else start
        user_info, at, _ = value[start:end].rpartition("@")
        if at:
            user, colon, password = user_info.partition(":")
            if (colon and password) or len(user) >= TOKEN_USER_CHARS:
                return True
        found = value.find("://", max(end, start))
    return False


def credential_reason(name: str, value: str) -> str | None:
    """Why variable `name` with `value` looks like a credential, or None. One rule for
    every variable pybox hands to a box (a run's `env`, an experiment's `env`). The
    reason names the variable, never the value."""
    if CREDENTIAL_NAME_RE.search(name):
        return f"Environment variable {name} looks like a credential"
    if value_has_url_credentials(value):
        return (
            f"Environment variable {name} looks like a credential: its value holds a URL with "
            "a password or token in it (scheme://user:password@host)"
        )
    return None


@dataclass(frozen=True)
class InputFile:
    """A file the program finds read-only in its input folder."""

    name: str
    data: bytes


@dataclass(frozen=True)
class RunRequest:
    code: bytes
    code_name: str = "main.py"
    inputs: tuple[InputFile, ...] = ()
    limits: LimitRequest = field(default_factory=LimitRequest)
    image: str = "stdlib"
    collect_outputs: bool = False
    # The program's arguments after its own name: sys.argv[1:].
    argv: tuple[str, ...] = ()
    # Environment variables for the program, on top of the box's own.
    env: tuple[tuple[str, str], ...] = ()
    # What the program reads on stdin (a regular file); empty means end-of-file at once.
    stdin_bytes: bytes = b""
    # The isolation lane asked for ("runc", "gvisor"); None: the operator's default.
    runtime: str | None = None
    # The box's network mode (pybox._core.egress): none unless asked, within the policy.
    egress: str | None = None
    # One of PROGRAM_KINDS; only pybox's own requests (sandboxes.fileops) set another.
    program: str = PROGRAM_CALLER

    @property
    def interpreter_flags(self) -> tuple[str, ...]:
        """The flags the box's Python starts the program with (after its path)."""
        return () if self.program == PROGRAM_CALLER else ISOLATED_FLAGS


@dataclass(frozen=True)
class PreparedRun:
    """A request ready to run: its limits resolved once, its image checked, its run id
    chosen. Made by `Session.prepare`, which creates nothing; every front end passes it
    to `Session.run`. The receipt (and anything that names the run) uses `run_id`."""

    request: RunRequest
    limits: Limits
    image: ImageRecord
    run_id: str
    # The lane chosen for the run, checked against the engine.
    runtime: RuntimeChoice = RUNC_CHOICE


def check_input_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidRequest(f"Input file names must be strings, not {type(name).__name__}.")
    problem = None
    if not name or name in (".", ".."):
        problem = "is empty or a dot entry"
    elif "/" in name or "\\" in name:
        problem = "contains a path separator; give a plain file name"
    elif name_problem(name) is not None:
        problem = f"contains {name_problem(name)}"
    elif len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        problem = f"is longer than {MAX_NAME_BYTES} bytes"
    if problem:
        raise InvalidRequest(f"Input file name {name!r} {problem}.")
    return name


def _check_argv(argv: object) -> None:
    if not isinstance(argv, tuple | list):
        raise InvalidRequest(f"argv must be a sequence of strings, not {type(argv).__name__}.")
    if len(argv) > MAX_ARGS:
        raise InvalidRequest(f"{len(argv)} program arguments were given; the most is {MAX_ARGS}.")
    total = 0
    for arg in argv:
        if not isinstance(arg, str):
            raise InvalidRequest(f"Program arguments must be strings, not {arg!r}.")
        if "\0" in arg:
            raise InvalidRequest(f"Program argument {arg[:80]!r} holds a NUL character.")
        total += len(arg.encode("utf-8", "surrogateescape")) + 1
    if total > MAX_ARGS_BYTES:
        raise InvalidRequest(
            f"The program arguments are {total} bytes; the most is {MAX_ARGS_BYTES}. "
            "Pass large data as an input file or on stdin."
        )


def check_env(env: object, *, allow_credentials: bool = False) -> None:
    """Names are plain identifiers, values hold no NUL, both bounded; pybox's own
    variables cannot be replaced; credential-shaped names and values need the operator
    (`credential_reason`)."""
    if not isinstance(env, tuple | list):
        raise InvalidRequest(f"env must be (name, value) pairs, not {type(env).__name__}.")
    if len(env) > MAX_ENV:
        raise InvalidRequest(f"{len(env)} environment variables were given; the most is {MAX_ENV}.")
    seen: set[str] = set()
    total = 0
    for item in env:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise InvalidRequest(
                f"Each environment variable must be a (name, value) pair: {item!r}."
            )
        name, value = item
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            raise InvalidRequest(
                f"Environment variable name {name!r} is not usable: use letters, digits and "
                "'_', not starting with a digit, at most 128 characters."
            )
        if not isinstance(value, str) or "\0" in value:
            raise InvalidRequest(f"Environment variable {name} must be a string without NUL.")
        if name in seen:
            raise InvalidRequest(f"Environment variable {name} is given twice.")
        seen.add(name)
        if name.upper().startswith("PYBOX_"):
            raise InvalidRequest(
                f"Environment variable {name} is pybox's own (PYBOX_*); choose another name."
            )
        reason = None if allow_credentials else credential_reason(name, value)
        if reason is not None:
            raise InvalidRequest(
                f"{reason}; pybox does not hand credentials to untrusted code. Leave it out "
                "(or rename a variable that holds none), or have the operator set "
                "allow_credential_env = true (PYBOX_ALLOW_CREDENTIAL_ENV=1)."
            )
        total += len(name) + len(value.encode("utf-8", "surrogateescape")) + 2
    if total > MAX_ENV_BYTES:
        raise InvalidRequest(
            f"The environment variables are {total} bytes; the most is {MAX_ENV_BYTES}. "
            "Pass large data as an input file or on stdin."
        )


def check_request(
    request: RunRequest, limits: Limits, *, allow_credential_env: bool = False
) -> None:
    """Refuse a request that cannot run as asked, before anything is created."""
    if not isinstance(request.code, bytes):
        raise InvalidRequest(f"The code must be bytes, not {type(request.code).__name__}.")
    if not isinstance(request.code_name, str) or not CODE_NAME_RE.fullmatch(request.code_name):
        raise InvalidRequest(
            f"The program's file name {request.code_name!r} is not usable: use letters, digits, "
            "'_', '-' or '.', ending in .py (for example main.py)."
        )
    check_image_name(request.image)
    if request.program not in PROGRAM_KINDS:
        raise InvalidRequest(
            f"The program kind {request.program!r} is not one of {', '.join(PROGRAM_KINDS)}."
        )
    if len(request.inputs) > MAX_INPUTS:
        raise InvalidRequest(
            f"{len(request.inputs)} input files were given; the most is {MAX_INPUTS}."
        )
    seen: set[str] = set()
    for item in request.inputs:
        name = check_input_name(item.name)
        if not isinstance(item.data, bytes):
            raise InvalidRequest(
                f"Input file {name!r} must hold bytes, not {type(item.data).__name__}."
            )
        if name in seen:
            raise InvalidRequest(f"Input file name {name!r} is given twice; names must be unique.")
        if name == request.code_name:
            raise InvalidRequest(
                f"Input file name {name!r} is the program's own name; inputs sit next to the "
                "program in its working folder. Rename the input."
            )
        seen.add(name)
    _check_argv(request.argv)
    check_env(request.env, allow_credentials=allow_credential_env)
    if not isinstance(request.stdin_bytes, bytes):
        raise InvalidRequest(f"stdin must be bytes, not {type(request.stdin_bytes).__name__}.")
    total = (
        len(request.code)
        + sum(len(item.data) for item in request.inputs)
        + len(request.stdin_bytes)
    )
    if total > limits.input_bytes:
        raise InvalidRequest(
            f"The code, inputs and stdin are {total} bytes; the maximum is "
            f"{limits.input_bytes} bytes (input_mib). Send less, or ask the operator to raise "
            "ceilings.input_mib."
        )
    # The code and inputs live in the box's writable tmpfs, next to what the program writes.
    if total > limits.writable_bytes // 2:
        raise InvalidRequest(
            f"The code, inputs and stdin are {total} bytes; they must fit in half of the box's "
            f"writable space ({limits.writable_bytes} bytes). Ask for more writable space "
            "(writable_mib) or send less."
        )
