"""`pybox verify`: prove containment on this machine with hostile programs.

Prints one entry per case (PASS or FAIL, what was attempted, the evidence by
source) as each case ends, wrapped to fit an 80-column terminal, or with
`--json` one versioned record on stdout.
Exit 0 only when every case passed and no box was left behind; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pybox._core.display import plural
from pybox._core.errors import PyboxError
from pybox._features.verify.suite import run_suite
from pybox._features.verify.verdict import CaseResult, SuiteResult
from pybox._frontends.cli._common import (
    EXIT_STOPPED,
    Commands,
    error_kind,
    fit,
    open_session,
    say,
)
from pybox._version import __version__

VERIFY_JSON_VERSION = 1
EXIT_NOT_CONTAINED = 1


def case_line(result: CaseResult) -> str:
    """One case, wrapped to fit an 80-column terminal (later lines indented).

    Evidence may quote what a hostile program printed: it is escaped before it is
    wrapped, so the escapes count towards the width."""
    evidence = "; ".join(f"{fact.source}: {fact.text}" for fact in result.facts)
    line = f"{'PASS' if result.passed else 'FAIL'} {result.name}: {result.attempted}."
    if result.failures:
        line += " FAILED: " + "; ".join(result.failures) + "."
    return fit(line + f" Evidence: {evidence or 'none'}.")


def case_json(result: CaseResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "passed": result.passed,
        "attempted": result.attempted,
        "criterion": result.criterion,
        "evidence": [{"source": fact.source, "fact": fact.text} for fact in result.facts],
        "failures": list(result.failures),
        "run_ids": list(result.run_ids),
        "duration_s": result.duration_s,
    }


def verify_json(
    suite: SuiteResult, engine: dict[str, str], runtime: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "pybox_verify_version": VERIFY_JSON_VERSION,
        "pybox_version": __version__,
        "passed": suite.passed,
        "engine": engine,
        "runtime": runtime or {"lane": "runc", "engine_runtime": "runc"},
        "cases": [case_json(case) for case in suite.cases],
        "left_behind": list(suite.left_behind),
        "duration_s": suite.duration_s,
    }


def _json_error(exc: PyboxError) -> str:
    return json.dumps(
        {
            "pybox_verify_version": VERIFY_JSON_VERSION,
            "error": {"kind": error_kind(exc), "message": str(exc)},
        }
    )


ENGINE_TITLES = {"docker": "Docker", "podman": "Podman"}


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        session = open_session(args)
        if args.runtime is not None:
            session.use_runtime(args.runtime)
        lane = session.runtime_choice()
        facts = session.engine_facts()
        session.image("stdlib")  # nothing can be verified without it
    except PyboxError as exc:
        if args.json:
            say(_json_error(exc), sys.stdout)
        raise
    engine = {
        "endpoint": facts.endpoint,
        "api_version": facts.api_version,
        "server_version": facts.server_version,
        "name": facts.name,
    }
    if not args.json:
        say(
            fit(
                f"pybox {__version__} verify: hostile programs against {facts.endpoint}, "
                f"{ENGINE_TITLES.get(facts.name, facts.name)} {facts.server_version}, "
                f"runtime {lane.lane} ({lane.engine_runtime})"
            ),
            sys.stdout,
        )

    def print_line(result: CaseResult) -> None:
        say(case_line(result), sys.stdout)

    try:
        suite = run_suite(
            session, config_path=args.config, on_result=None if args.json else print_line
        )
    except PyboxError as exc:
        if args.json:
            say(_json_error(exc), sys.stdout)
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, in a run (RunInterrupted) or between
        say("pybox: verify stopped; the boxes of its cases were removed.")
        return EXIT_STOPPED
    if args.json:
        runtime = {"lane": lane.lane, "engine_runtime": lane.engine_runtime}
        say(json.dumps(verify_json(suite, engine, runtime)), sys.stdout)
        return 0 if suite.passed else EXIT_NOT_CONTAINED
    for name in suite.left_behind:
        say(fit(f"FAIL left behind: {name} (now removed)"), sys.stdout)
    passed = sum(case.passed for case in suite.cases)
    verdict = "contained" if suite.passed else "NOT contained"
    say(
        fit(
            f"{verdict}: {passed} of {len(suite.cases)} cases passed; "
            f"{plural(len(suite.left_behind), 'box', 'boxes')} left behind; "
            f"{suite.duration_s:.1f} s"
        ),
        sys.stdout,
    )
    return 0 if suite.passed else EXIT_NOT_CONTAINED


def register(commands: Commands) -> None:
    verify = commands.add_parser(
        "verify", help="prove containment here: run hostile programs, judge each on evidence"
    )
    verify.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    verify.add_argument(
        "--runtime",
        metavar="NAME",
        help="run every case in this isolation runtime (runc or gvisor), where the operator "
        "allows it (default: the operator's runtime)",
    )
    verify.set_defaults(handler=cmd_verify)
