"""`pybox repair`: a model proposes fixes; each runs in a fresh box until the goal is met.

Exit codes: 0 when the goal was met; 1 when the loop stopped without meeting
it (a budget ran out, too many invalid proposals); 125 when the model failed
or pybox did; 130 when cancelled; 2 for a rejected request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pybox._core.errors import InvalidRequest, PyboxError, StateError
from pybox._core.repair import (
    REPAIR_FIELDS_BY_KEY,
    REPAIR_VERSION,
    RepairBudget,
    RepairGoal,
    RepairModel,
    RepairReport,
    StopReason,
    sha256_hex,
)
from pybox._features.repair.fixed_files import (
    fixed_file_candidates,
    replace_atomically,
    with_destination,
    write_new_file,
)
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    EXIT_STOPPED,
    Commands,
    FlagTable,
    add_bounded_flags,
    bounded_flag_values,
    json_error,
    open_session,
    progress,
    read_file,
    say,
)
from pybox._frontends.cli._exec import add_limit_flags, limit_request

EXIT_GOAL_NOT_MET = 1

BOUND_FLAGS: FlagTable = {
    "--max-rounds": ("rounds", "most rounds (model replies)"),
    "--max-seconds": ("total_s", "most wall-clock seconds for the whole repair"),
    "--max-model-calls": ("model_calls", "most model calls, retries after rate limits included"),
    "--max-prompt-bytes": ("prompt_bytes", "largest prompt sent to the model"),
    "--max-reply-bytes": ("reply_bytes", "most reply bytes accepted from the model in all"),
    "--max-proposal-bytes": ("proposal_bytes", "largest proposed program"),
    "--max-invalid": ("invalid_proposals", "stop after this many invalid proposals"),
}

EXIT_BY_STOP = {
    StopReason.GOAL_MET: 0,
    StopReason.BUDGET_EXHAUSTED: EXIT_GOAL_NOT_MET,
    StopReason.INVALID_PROPOSAL: EXIT_GOAL_NOT_MET,
    StopReason.MODEL_ERROR: EXIT_PYBOX_FAILED,
    StopReason.CANCELLED: EXIT_STOPPED,
}


def _budget(args: argparse.Namespace) -> RepairBudget:
    return RepairBudget(**bounded_flag_values(args, BOUND_FLAGS, REPAIR_FIELDS_BY_KEY))  # type: ignore[arg-type]


def _goal(args: argparse.Namespace, program: Path) -> RepairGoal:
    if args.expect_stdout is not None:
        return RepairGoal.expect_stdout(args.expect_stdout)
    if args.tests is not None:
        tests = Path(args.tests)
        module = program.stem
        if program.suffix != ".py" or not module.isidentifier():
            raise InvalidRequest(
                f"With --tests the program is imported as a module, so {program.name!r} needs "
                "an importable name (letters, digits, '_', ending in .py). Rename or copy it."
            )
        return RepairGoal.tests(
            read_file(args.tests, "tests file"), tests_name=tests.name, module_name=module
        )
    return RepairGoal.exit0()


def _model(args: argparse.Namespace) -> RepairModel:
    if (args.model_cmd is None) == (args.provider is None):
        raise InvalidRequest(
            "Choose one model: --model-cmd 'COMMAND' (prompt on stdin, reply on stdout), or "
            "--provider openai|anthropic --model NAME."
        )
    if args.model_cmd is not None:
        extras = [f for f, v in (("--model", args.model), ("--base-url", args.base_url)) if v]
        if args.key_env is not None:
            extras.append("--key-env")
        if extras:
            raise InvalidRequest(f"{', '.join(extras)} go with --provider, not --model-cmd.")
        return RepairModel.command(args.model_cmd)
    if not args.model:
        raise InvalidRequest(f"--provider {args.provider} needs --model NAME.")
    if args.provider == "openai":
        return RepairModel.openai(
            args.model, base_url=args.base_url, key_env=args.key_env or "OPENAI_API_KEY"
        )
    return RepairModel.anthropic(
        args.model, base_url=args.base_url, key_env=args.key_env or "ANTHROPIC_API_KEY"
    )


def _check_destination(args: argparse.Namespace, program: Path) -> Path | None:
    """Refuse an unusable destination before any model call or run."""
    if args.apply:
        if args.output is not None:
            raise InvalidRequest("--apply replaces the original; it does not go with --output.")
        if not os.access(program, os.W_OK) or not os.access(program.parent, os.W_OK):
            raise InvalidRequest(
                f"--apply needs to write {program} and its folder; it cannot. Drop --apply to "
                "get the fixed program in a new file."
            )
        return None
    if args.output is None:
        return None
    output = Path(args.output)
    if output.exists() or output.is_symlink():
        raise InvalidRequest(
            f"--output {output} already exists; pybox never overwrites a file. Name a new file."
        )
    if not output.parent.is_dir():
        raise InvalidRequest(f"--output {output}: the folder {output.parent} does not exist.")
    return output


def _keep_fixed(
    report: RepairReport, program: Path, output: Path | None, apply: bool
) -> RepairReport:
    """Write the fixed program: over the original (only with --apply), else a new file."""
    code = report.fixed_code
    if code is None:
        return report
    if apply:
        try:
            replace_atomically(program, code, sha256_hex(report.original_code))
            return with_destination(report, program, applied=True)
        except StateError as exc:
            say(f"pybox: {exc} The fixed program goes to a new file instead.")
    candidates = fixed_file_candidates(program)
    if output is not None:
        # Created after the check? Then a numbered name next to it: nothing is lost.
        candidates = [output, *fixed_file_candidates(output)]
    written = write_new_file(candidates, code)
    return with_destination(report, written, applied=False)


def cmd_repair(args: argparse.Namespace) -> int:
    try:
        program = Path(args.program)
        code = read_file(args.program, "program")
        job = RepairJob(
            code=code,
            goal=_goal(args, program),
            model=_model(args),
            code_name=program.name,
            budget=_budget(args),
            run_limits=limit_request(args),
            image=args.image,
        )
        output = _check_destination(args, program)
        loop = RepairLoop(open_session(args), job, os.environ)
    except PyboxError as exc:
        if args.json:
            say(json_error("pybox_repair_version", REPAIR_VERSION, exc), sys.stdout)
        raise
    report = loop.run(progress=lambda message: progress(f"repair: {message}"))
    try:
        report = _keep_fixed(report, program, output, args.apply)
    finally:
        if args.json:
            say(json.dumps(report.to_dict()), sys.stdout)
        else:
            for line in report.summary_lines():
                say(line, sys.stdout)
    return EXIT_BY_STOP[report.stop_reason]


def register(commands: Commands) -> None:
    repair = commands.add_parser(
        "repair",
        help="let a model propose fixes; each runs in a fresh box until a goal is met",
        description=(
            "A model proposes complete programs; pybox runs each in a fresh sealed box and "
            "stops at the first that meets the goal, or when a bound runs out. The fixed "
            "program goes to a new file (FILE.fixed.py) unless --apply."
        ),
    )
    repair.add_argument("program", metavar="FILE", help="the Python program to repair")
    goal = repair.add_mutually_exclusive_group(required=True)
    goal.add_argument("--goal", choices=["exit0"], help="exit0: the program exits with status 0")
    goal.add_argument(
        "--expect-stdout", metavar="TEXT", help="the program exits 0 and prints exactly TEXT"
    )
    goal.add_argument(
        "--tests",
        metavar="TEST_FILE",
        help="the unittest tests in TEST_FILE pass (they import FILE as a module)",
    )
    model = repair.add_argument_group("model (one of --model-cmd or --provider)")
    model.add_argument(
        "--model-cmd", metavar="COMMAND", help="a command: prompt on stdin, reply on stdout"
    )
    model.add_argument("--provider", choices=["openai", "anthropic"], help="an HTTP API")
    model.add_argument("--model", metavar="NAME", help="the model name for --provider")
    model.add_argument("--base-url", metavar="URL", help="the API's base URL for --provider")
    model.add_argument(
        "--key-env",
        metavar="VAR",
        help="environment variable with the API key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    bounds = repair.add_argument_group("bounds (at most the operator's ceilings)")
    add_bounded_flags(bounds, BOUND_FLAGS, REPAIR_FIELDS_BY_KEY)
    add_limit_flags(repair)
    repair.add_argument("--image", default="stdlib", help="a recorded image (default: stdlib)")
    repair.add_argument(
        "--output", metavar="NEW_FILE", help="where the fixed program goes (must not exist)"
    )
    repair.add_argument(
        "--apply",
        action="store_true",
        help="replace FILE with the fixed program (only when the goal was met)",
    )
    repair.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    repair.set_defaults(handler=cmd_repair)
