"""`pybox setup` and `pybox image`: build, record and list images."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from pybox._core.errors import EngineError, InvalidRequest, PyboxError
from pybox._core.limits import LimitRequest
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._features.images.records import BuildPlan, stdlib_build_access, sudo_problem
from pybox._features.vm.control import colima_of, size_of, start_vm, stop_vm
from pybox._features.vm.setup import plan_colima_vm, plan_vm_image, vm_build_source
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    ArgumentParser,
    Commands,
    add_tool_flags,
    boxes_exist,
    open_session,
    progress,
    say,
    tool_paths,
)
from pybox._orchestration.doctor import READY_COMMAND
from pybox._orchestration.engine_steps import engine_problem_step
from pybox._orchestration.session import Session


def cmd_setup(args: argparse.Namespace) -> int:
    mode = "" if args.yes else " (dry run: nothing will be changed)"
    say(f"pybox setup{mode}")
    session = open_session(args)
    if session.in_vm:
        return _setup_colima(args, session)
    return _setup_local(args, session)


def _setup_local(args: argparse.Namespace, session: Session) -> int:
    """Linux: report the local engine, boxes, images and what the build needs from this
    user; build the image with --yes."""
    say("  platform: linux: boxes run on the local engine")
    engine_ok = _report_engine(session)
    plan = None
    if engine_ok:
        _report_boxes(session)
        _report_state(session, args.yes)
        plan = session.plan_stdlib(mirror=args.mirror, suite=args.suite)
        _report_image(plan, args.yes)
    build_ok = plan is not None and plan.up_to_date and not args.force
    sudo = None if build_ok else sudo_problem(os.environ, str(session.state_dir))
    if sudo is not None:
        say(f"  PROBLEM: {sudo}")
    if not build_ok:
        build_ok = _report_build_access()
    if not (engine_ok and build_ok) or sudo is not None:
        say("Nothing was changed. Fix what is marked above, then run `pybox setup` again.")
        return EXIT_PYBOX_FAILED
    assert plan is not None
    if not args.yes:
        say("  then:   would run print(6*7) in a fresh box to check the whole path")
        say("Run `pybox setup --yes` to do this.")
        return 0
    session.build_stdlib(plan, progress, force=args.force)
    _check_run(session)
    say(f"pybox is ready: {READY_COMMAND}")
    return 0


def _report_engine(session: Session) -> bool:
    """The engine line: its facts, or why it cannot be reached and the step that fixes it."""
    try:
        engine = session.engine_report()
    except EngineError as exc:
        say(f"  engine: UNREACHABLE: {exc}")
        say(f"    next: {engine_problem_step(os.environ, exc)}")
        return False
    say(
        f"  engine: {engine['socket']} ({engine['found_by']}), Docker {engine['server_version']}, "
        f"API {engine['api_version']}, cgroup v{engine['cgroup_version']} "
        f"({engine['cgroup_driver']}), runtimes {', '.join(engine['runtimes'])}"
    )
    return True


def _report_build_access() -> bool:
    """Exactly what building the image needs from this user, what it has and what it lacks."""
    access = stdlib_build_access()
    who = "root" if access.is_root else f"{access.user}, not root"
    say(f"  build:  as {who}: the tree is made with {access.method}; it needs:")
    if not access.is_root:
        say("    privileges: no root; root only inside a user namespace mapped onto your IDs")
    for need in access.needs:
        if need.have:
            say(f"    found:   {need.what}")
        else:
            say(f"    MISSING: {need.what} -> next: {need.fix}")
    return not access.missing


def _setup_colima(args: argparse.Namespace, session: Session) -> int:
    """macOS: pybox's own Colima VM, then the image in it, then stop the VM."""
    host = session.host
    assert host is not None
    size = size_of(host)
    say(f"  platform: colima ({host.choice.chosen_by}): boxes run in pybox's own VM")
    colima, items = plan_colima_vm(
        lambda: colima_of(host, tool_paths(args), require_docker=True), size
    )
    labels = {
        "check": "found",
        "missing": "MISSING",
        "folder": "creating" if args.yes else "would create",
        "download": "downloading" if args.yes else "would download",
        "command": "running" if args.yes else "would run",
        "verify": "then verifying" if args.yes else "then would verify",
    }
    for item in items:
        say(f"  {labels.get(item.kind, item.kind)}: {item.text}")
    if colima is None:
        say("Nothing was changed. Do the above, then run `pybox setup` again.")
        return EXIT_PYBOX_FAILED
    _report_state(session, args.yes)
    say(
        "  image:  the stdlib image is built inside the VM, unless it is already built and "
        "recorded:"
    )
    source = vm_build_source(host, args.mirror, args.suite)
    for item in plan_vm_image(colima, source):
        say(f"    {labels.get(item.kind, item.kind)}: {item.text}")
    say("  then:   run print(6*7) in a fresh box, then stop the VM")
    if not args.yes:
        say("Run `pybox setup --yes` to do this.")
        return 0
    source.checked()  # before the VM is started
    start_vm(colima, size, progress)
    try:
        plan = session.plan_stdlib(mirror=args.mirror, suite=args.suite)
        _report_image(plan, True)
        session.build_stdlib(plan, progress, force=args.force)
        _check_run(session)
    finally:
        stop_vm(colima)
        progress("stopped the VM")
    say(f"pybox is ready: pybox vm start, then {READY_COMMAND}")
    return 0


def _report_boxes(session: Session) -> None:
    boxes = session.leftovers()
    orphaned = sum(1 for box in boxes if box["owner_alive"] is False)
    say(
        f"  boxes:  {boxes_exist(len(boxes))}; {orphaned} left by runs that died"
        + (" (`pybox sweep` removes them)" if orphaned else "")
    )


def _report_state(session: Session, doing: bool) -> None:
    root = session.state_dir
    if root.exists():
        say(f"  state:  {root} (exists)")
    else:
        verb = "creating" if doing else "would create"
        say(f"  state:  {verb} {root} (0700) for images.json and run records")


def _report_image(plan: BuildPlan, doing: bool) -> None:
    if plan.up_to_date and plan.recorded is not None:
        say(f"  image:  stdlib is built and recorded ({plan.recorded.image_id[:19]})")
        return
    say(
        f"  image:  {'building' if doing else 'would build'} stdlib as {plan.reference}: "
        f"Debian {plan.recipe.suite} minbase + python3 from {plan.recipe.mirror} "
        f"(mirror found in {plan.mirror_found_in})"
    )
    say(
        f"  {'downloading' if doing else 'would download'}: the Debian packages of python3 "
        f"and a minimal base from {plan.recipe.mirror}"
    )
    say(
        f"  folder: {'using' if doing else 'would use'} a temporary pybox-build-* folder in "
        f"{tempfile.gettempdir()}, removed afterwards"
    )


def _check_run(session: Session) -> None:
    request = RunRequest(code=b"print(6*7)\n", limits=LimitRequest(timeout_s=30.0))
    outcome = session.run(session.prepare(request))
    receipt = outcome.receipt
    if receipt.status is not Status.SUCCEEDED or outcome.stdout != b"42\n":
        for line in receipt.summary_lines():
            say(line)
        raise PyboxError("The check run did not print 42; see the receipt above.")
    say(
        "  check:  print(6*7) -> 42 in a fresh box "
        f"({receipt.observed_by_engine.posture_fields_checked} "
        "settings verified, box removed and confirmed gone)"
    )


def cmd_image_build(args: argparse.Namespace) -> int:
    session = open_session(args)
    if args.name == "stdlib":
        if args.lock:
            raise InvalidRequest(
                "stdlib is built with debootstrap and takes no --lock; build your packages "
                "under another name (pybox image build NAME --lock FILE)."
            )
        plan = session.plan_stdlib(mirror=args.mirror, suite=args.suite)
        record = session.build_stdlib(plan, progress, force=args.force)
    else:
        if args.suite:
            raise InvalidRequest(
                "--suite only applies to the stdlib image; a Debian recipe (locks/NAME.toml) "
                "names its own suite, and a lock-built image takes its base from stdlib."
            )
        operations = session.images()
        lock_plan = operations.plan_build(args.name, args.lock, args.mirror)
        record = operations.build(lock_plan, progress, force=args.force, repin=args.repin).record
    say(f"{record.name} {record.image_id} {record.recipe_hash}", sys.stdout)
    return 0


def cmd_image_verify(args: argparse.Namespace) -> int:
    result = open_session(args).images().verify(args.name)
    record = result.record
    if args.json:
        say(
            json.dumps(
                {
                    "name": record.name,
                    "image_id": record.image_id,
                    "recipe_hash": record.recipe_hash,
                    "digest": record.digest,
                    "python": record.python,
                    "ok": result.ok,
                    "problems": list(result.problems),
                    "checks": list(result.checks),
                    "packages": list(record.packages),
                }
            ),
            sys.stdout,
        )
    else:
        say(f"{record.name} {record.image_id} recipe {record.recipe_hash}", sys.stdout)
        for check in result.checks:
            say(f"  ok:      {check}", sys.stdout)
        for problem in result.problems:
            say(f"  PROBLEM: {problem}", sys.stdout)
        say(f"  packages: {len(record.packages)} recorded", sys.stdout)
    return 0 if result.ok else EXIT_PYBOX_FAILED


def cmd_image_rm(args: argparse.Namespace) -> int:
    removed = open_session(args).images().remove(args.name)
    say(
        f"removed {args.name}: {', '.join(removed) or 'nothing left in the engine'}; "
        "record forgotten",
        sys.stdout,
    )
    return 0


def cmd_image_pull(args: argparse.Namespace) -> int:
    record = open_session(args).images().pull(args.name, args.registry, args.pins, progress)
    say(f"{record.name} {record.image_id} {record.digest}", sys.stdout)
    return 0


def cmd_image_push(args: argparse.Namespace) -> int:
    pin = open_session(args).images().push(args.name, args.registry, progress)
    say(f"# pin for {args.pins or 'locks/images.toml'}", sys.stdout)
    say(pin.toml().rstrip("\n"), sys.stdout)
    return 0


def cmd_image_list(args: argparse.Namespace) -> int:
    session = open_session(args)
    statuses = session.check_images()
    if args.json:
        say(
            json.dumps(
                [
                    {
                        "name": s.record.name,
                        "image_id": s.record.image_id,
                        "recipe_hash": s.record.recipe_hash,
                        "digest": s.record.digest,
                        "python": s.record.python,
                        "built_at": s.record.built_at,
                        "present": s.present,
                        "problem": s.problem,
                    }
                    for s in statuses
                ]
            ),
            sys.stdout,
        )
        return 0
    if not statuses:
        say("No images recorded. Run `pybox setup --yes`.", sys.stdout)
    for s in statuses:
        state = "ok" if s.problem is None else s.problem
        say(
            f"{s.record.name:<12} {s.record.image_id[:19]}  built {s.record.built_at}  {state}",
            sys.stdout,
        )
    return 0


def _add_build_source_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mirror",
        help="Debian mirror URL (default: from this machine's apt sources; required on macOS)",
    )
    parser.add_argument("--suite", help="Debian suite (default: this machine's; required on macOS)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")


def register(commands: Commands) -> None:
    setup = commands.add_parser(
        "setup", help="check the engine (or make pybox's VM on macOS) and build the stdlib image"
    )
    setup.add_argument("--yes", action="store_true", help="do it (without it: a dry run)")
    _add_build_source_flags(setup)
    add_tool_flags(setup)
    setup.set_defaults(handler=cmd_setup)

    image = commands.add_parser("image", help="build and list images")
    image_commands = image.add_subparsers(
        dest="image_command", metavar="ACTION", parser_class=ArgumentParser
    )
    image_commands.required = True
    build = image_commands.add_parser(
        "build",
        help="build stdlib, an environment from a Debian recipe (node18, node20, go, rust), "
        "or an image from a hash-locked lock file",
    )
    build.add_argument(
        "name", help="image name: stdlib, data, node18, node20, go, rust, or your own with --lock"
    )
    build.add_argument(
        "--lock",
        metavar="FILE",
        help="requirements with hashes (pip-compile/uv pip compile --generate-hashes), or a "
        "Debian recipe FILE.toml; default: pybox's locks/NAME.toml, else locks/NAME.lock",
    )
    build.add_argument(
        "--repin",
        action="store_true",
        help="Debian recipes: write the Release hash and package versions this build found "
        "into the recipe instead of stopping when they moved",
    )
    _add_build_source_flags(build)
    build.set_defaults(handler=cmd_image_build)
    listing = image_commands.add_parser("list", help="list recorded images")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_image_list)
    verify = image_commands.add_parser(
        "verify", help="check a recorded image against the engine and its lock file"
    )
    verify.add_argument("name")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_image_verify)
    remove = image_commands.add_parser("rm", help="remove a recorded image and its record")
    remove.add_argument("name")
    remove.set_defaults(handler=cmd_image_rm)
    pull = image_commands.add_parser("pull", help="pull a pinned image by digest and record it")
    pull.add_argument("name")
    pull.add_argument("--registry", metavar="HOST[:PORT]", help="default: $PYBOX_REGISTRY")
    pull.add_argument("--pins", metavar="FILE", help="default: pybox's locks/images.toml")
    pull.set_defaults(handler=cmd_image_pull)
    push = image_commands.add_parser(
        "push", help="push a recorded image and print its pin (name@digest)"
    )
    push.add_argument("name")
    push.add_argument("--registry", metavar="HOST[:PORT]", required=True)
    push.add_argument("--pins", metavar="FILE", help="the pins file the printed pin is for")
    push.set_defaults(handler=cmd_image_push)
