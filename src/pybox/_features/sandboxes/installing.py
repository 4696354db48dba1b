"""Packages for a sandbox without a network window in it.

A separate, short-lived install box (the sandbox's image, no agent code, a
network for pip only: `pybox._features.sandboxes.install`) installs wheels into
a folder; pybox streams that folder into the sandbox's user site-packages (the
site module puts it on sys.path for every later run) with one of its own
programs. The sandbox itself never gets a network interface, so code the agent
already ran there can never reach the network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pybox._core.errors import SandboxError
from pybox._core.receipt import LibraryFact
from pybox._features.sandboxes import fileops
from pybox._features.sandboxes.install import install_libraries
from pybox._features.sandboxes.programs import attached, run_limits, run_program
from pybox._features.sandboxes.records import PACKAGES_FOLDER
from pybox._features.store import SandboxRow

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes


def install_into(
    sandboxes: Sandboxes,
    row: SandboxRow,
    libraries: tuple[str, ...],
    say: Callable[[str], None] | None,
) -> dict[str, Any]:
    """Install `libraries` (already parsed) into the sandbox `row`; the caller holds
    its lock. Returns what was installed: names, versions, wheel hashes."""
    session = sandboxes.session
    image = session.verified_image(row.image_name)
    limits = sandboxes.get(row.sandbox_id).limits
    # The install box is a box like any other: it takes a box slot for its life.
    with session.admission.hold(True, what=f"libraries for {row.sandbox_id}", expected_s=60.0):
        installed = install_libraries(
            session.engine,
            image,
            libraries,
            owner=session.owner,
            environ=session.environ,
            max_bytes=limits.writable_bytes,
            say=say,
        )
    with attached(sandboxes, row.sandbox_id) as (fresh, box):
        request = fileops.unpack_request(PACKAGES_FOLDER, installed.tar_bytes)
        limits = run_limits(box.limits, request)
        facts = tuple(LibraryFact(p.name, p.version, p.wheel_sha256) for p in installed.packages)
        outcome = run_program(
            sandboxes, fresh, box, request, limits, "sandbox.install", None, None, None, facts
        )
    report = fileops.outcome_report(outcome, PACKAGES_FOLDER, "unpack the libraries into")
    if not isinstance(report.get("files"), int):
        raise SandboxError("The sandbox did not say how many library files it unpacked.")
    packages = [
        {"name": p.name, "version": p.version, "wheel_sha256": p.wheel_sha256}
        for p in installed.packages
    ]
    names = tuple(sorted({*row.libraries, *libraries}))
    sandboxes.store.transition(
        row.sandbox_id, "ready", f"installed {', '.join(libraries)}"[:300], libraries=names
    )
    sandboxes.store.audit(
        "sandbox.install",
        row.sandbox_id,
        {"requested": list(libraries), "packages": packages, "run_id": outcome.receipt.run_id},
    )
    return {
        "requested": list(libraries),
        "packages": packages,
        "install_box": installed.install_box,
        "duration_s": round(installed.duration_s, 3),
        "run_id": outcome.receipt.run_id,
    }
