"""The preload report in the receipt: the bootstrap's untrusted word kept only in
the shapes it may take (the freeze included), in the JSON the schema allows and
on the summary's preload line."""

from __future__ import annotations

import dataclasses
from typing import Any

from pybox._boxes.receipt import build_receipt
from pybox._boxes.record import RunRecord
from tests.unit.test_receipt_build import record
from tests.unit.test_receipt_contract import _validator

MODULES = ("numpy", "pandas")
REPORT = {
    "modules": ["numpy", "pandas"],
    "fallback": None,
    "seconds": 1.3412,
    "waited_s": 0.0,
    "rss_before_bytes": 10 * 2**20,
    "rss_bytes": 98 * 2**20,
    "peak_rss_bytes": 99 * 2**20,
    "printed_bytes": 0,
    "frozen_objects": 104_233,
    "freeze_s": 0.0612,
}


def valid(document: dict[str, Any]) -> None:
    """The reported_by_program part against the shipped schema (the hand-made
    record's run ID and such are not what a real run has)."""
    where = {"$ref": "receipt.schema.json#/properties/reported_by_program"}
    _validator(where).validate(document["reported_by_program"])


def preloaded(**report: Any) -> RunRecord:
    base = record()
    return dataclasses.replace(
        base,
        spec=dataclasses.replace(base.spec, preload=MODULES),
        box_source="warm_pool",
        preload_report=dict(REPORT, **report),
    )


def test_the_freeze_is_in_the_report_the_json_and_the_summary() -> None:
    receipt = build_receipt(preloaded())
    report = receipt.reported_by_program.preload
    assert report is not None and report.modules == MODULES
    assert report.frozen_objects == 104_233 and report.freeze_s == 0.0612
    document = receipt.to_dict()
    valid(document)
    shown = document["reported_by_program"]["preload"]
    assert (shown["frozen_objects"], shown["freeze_s"]) == (104_233, 0.0612)
    (line,) = [line for line in receipt.summary_lines() if "preload:" in line]
    assert line == (
        "  preload: numpy, pandas imported before the code arrived; "
        "104233 objects frozen by gc.freeze() in 0.06 s"
    )


def test_a_fallback_froze_nothing_whatever_the_box_says() -> None:
    receipt = build_receipt(preloaded(modules=[], fallback="the run has arguments"))
    report = receipt.reported_by_program.preload
    assert report is not None and report.modules == () and report.frozen_objects == 0
    valid(receipt.to_dict())
    (line,) = [line for line in receipt.summary_lines() if "preload:" in line]
    assert "frozen" not in line and "a fresh interpreter ran it" in line


def test_numbers_that_are_not_numbers_are_unknown() -> None:
    receipt = build_receipt(preloaded(frozen_objects="many", freeze_s=-1))
    report = receipt.reported_by_program.preload
    assert report is not None and report.frozen_objects is None and report.freeze_s is None
    valid(receipt.to_dict())
    (line,) = [line for line in receipt.summary_lines() if "preload:" in line]
    assert line == "  preload: numpy, pandas imported before the code arrived"


def test_a_box_that_sent_no_freeze_figures_has_none() -> None:
    older = {k: v for k, v in REPORT.items() if k not in ("frozen_objects", "freeze_s")}
    base = preloaded()
    receipt = build_receipt(dataclasses.replace(base, preload_report=older))
    report = receipt.reported_by_program.preload
    assert report is not None and (report.frozen_objects, report.freeze_s) == (None, None)
