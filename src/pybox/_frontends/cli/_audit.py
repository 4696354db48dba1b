"""`pybox audit tail|verify`: pybox's append-only, hash-chained audit log (docs/store.md).

`verify` recomputes every entry's hash and link, and every stored run's record
against the hash the chain holds for it: exit 0 and `audit chain intact: N
entries` with a line on the stored runs (how many the chain covers, and which it
does not), or exit 1 naming the first broken link or changed record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pybox._core.display import escape_text, plural
from pybox._core.errors import PyboxError
from pybox._features.store import AuditEntry, AuditVerdict, RunsVerdict, Store, open_store
from pybox._frontends.cli._common import ArgumentParser, Commands, json_error, say
from pybox._frontends.cli._runs import positive_int, when

AUDIT_JSON_VERSION = 1
VERSION_KEY = "pybox_audit_version"
EXIT_BROKEN = 1
NOT_COVERED_SHOWN = 5  # run ids named on the line; --json lists them all


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "at": entry.at,
        "operation": entry.operation,
        "subject": entry.subject,
        "details": dict(entry.details),
        "prev_hash": entry.prev_hash,
        "entry_hash": entry.entry_hash,
    }


def entry_line(entry: AuditEntry) -> str:
    details = json.dumps(dict(entry.details), sort_keys=True)
    return escape_text(
        f"{entry.seq:>6}  {when(entry.at)}  {entry.entry_hash[:16]}  {entry.operation:<10}  "
        f"{entry.subject:<16}  {details}"
    )


def verdict_line(verdict: AuditVerdict) -> str:
    if verdict.ok:
        line = f"audit chain intact: {plural(verdict.entries, 'entry', 'entries')}"
        return line if verdict.runs is None else f"{line}\n{runs_line(verdict.runs)}"
    return escape_text(
        f"audit chain BROKEN at entry {verdict.first_broken_seq}: {verdict.reason} "
        f"({plural(verdict.entries, 'entry', 'entries')} read)"
    )


def runs_line(runs: RunsVerdict) -> str:
    """The stored runs: how many the chain covers, and the ones it does not, named."""
    line = f"stored runs: {runs.covered} covered by the chain"
    if runs.not_covered:
        shown = ", ".join(runs.not_covered[:NOT_COVERED_SHOWN])
        more = len(runs.not_covered) - NOT_COVERED_SHOWN
        line += (
            f"; {len(runs.not_covered)} NOT covered (recorded before pybox chained run "
            f"records, or added by someone else; unverified): {shown}"
            + (f" and {more} more (--json lists them)" if more > 0 else "")
        )
    if runs.unfinished:
        line += f"; {runs.unfinished} with no recorded end (no receipt)"
    return escape_text(line)


def runs_json(runs: RunsVerdict | None) -> dict[str, Any] | None:
    if runs is None:
        return None
    return {
        "covered": runs.covered,
        "not_covered": list(runs.not_covered),
        "unfinished": runs.unfinished,
    }


def _store(args: argparse.Namespace) -> Store:
    return open_store(os.environ, args.config)


def cmd_tail(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        entries = store.audit_tail(args.n)
    except PyboxError as exc:
        if args.json:
            say(json_error(VERSION_KEY, AUDIT_JSON_VERSION, exc), sys.stdout)
        raise
    if args.json:
        record = {VERSION_KEY: AUDIT_JSON_VERSION, "entries": [entry_json(e) for e in entries]}
        say(json.dumps(record), sys.stdout)
    elif not entries:
        say(f"the audit log in {store.path} is empty", sys.stdout)
    else:
        header = (
            f"{'SEQ':>6}  {'AT (UTC)':<19}  {'HASH':<16}  {'OPERATION':<10}  {'SUBJECT':<16}  "
            "DETAILS"
        )
        say("\n".join([header, *(entry_line(e) for e in entries)]), sys.stdout)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        verdict = _store(args).verify_audit()
    except PyboxError as exc:
        if args.json:
            say(json_error(VERSION_KEY, AUDIT_JSON_VERSION, exc), sys.stdout)
        raise
    if args.json:
        record = {
            VERSION_KEY: AUDIT_JSON_VERSION,
            "ok": verdict.ok,
            "entries": verdict.entries,
            "first_broken_seq": verdict.first_broken_seq,
            "reason": verdict.reason,
            "runs": runs_json(verdict.runs),
        }
        say(json.dumps(record), sys.stdout)
    else:
        say(verdict_line(verdict), sys.stdout)
    return 0 if verdict.ok else EXIT_BROKEN


def register(commands: Commands) -> None:
    audit = commands.add_parser("audit", help="show the audit log's last entries, verify its chain")
    actions = audit.add_subparsers(
        dest="audit_command", metavar="ACTION", parser_class=ArgumentParser
    )
    actions.required = True
    tail = actions.add_parser("tail", help="the last entries, oldest first")
    tail.add_argument("-n", type=positive_int, default=20, metavar="N", help="how many entries")
    tail.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    tail.set_defaults(handler=cmd_tail)
    verify = actions.add_parser(
        "verify", help="recompute the hash chain; exit 1 naming the first broken link"
    )
    verify.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    verify.set_defaults(handler=cmd_verify)
