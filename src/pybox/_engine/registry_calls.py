"""Registry calls: what push and pull answers say, and when TLS is not asked for.

Docker treats a registry on 127.0.0.0/8 as plain HTTP by default; Podman 4.3
pings every registry over HTTPS unless it is told otherwise, per call
(`tlsVerify=false`) or in `registries.conf`. pybox tells it so for a loopback
registry only, which is what Docker does; any other registry keeps TLS
verification (docs/engines.md, "Registries on Podman").

Measured on Podman 4.3.1: the compatible push takes `tlsVerify` and answers the
digest as a status line (`TAG: digest: sha256:... size: N`), not Docker's `aux`
event; the compatible pull (`/images/create`) ignores `tlsVerify`, so a pull goes
through Podman's own `/libpod/images/pull`, whose answer ends with the image's
`id` and which checks the content against the digest as Docker's does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pybox._core.addresses import is_loopback
from pybox._core.errors import EngineError
from pybox._engine.interface import JSONObject

_DIGEST_STATUS = re.compile(r": digest: (sha256:[0-9a-f]{64}) size: \d+$")


def registry_host(repository: str) -> str:
    """The host of `HOST[:PORT]/path` ('' when the first part names no registry:
    no dot, no colon and not `localhost`, as Docker reads a reference)."""
    first, slash, _ = repository.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return ""
    if first.startswith("["):  # [::1]:5000
        return first[1:].partition("]")[0]
    return first.rpartition(":")[0] if first.count(":") == 1 else first


def tls_query(repository: str) -> dict[str, str]:
    """`tlsVerify=false` for a loopback registry, as Docker treats one; nothing else."""
    return {"tlsVerify": "false"} if is_loopback(registry_host(repository)) else {}


def pushed_digest(events: Sequence[JSONObject]) -> str | None:
    """The manifest digest a push reported, in Docker's form or Podman's."""
    for event in events:
        aux = event.get("aux")
        if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
            return str(aux["Digest"])
        status = event.get("status")
        if isinstance(status, str):
            found = _DIGEST_STATUS.search(status.strip())
            if found:
                return found.group(1)
    return None


def pull_query(repository: str, digest: str, platform: str) -> dict[str, str]:
    """Podman's own pull of exactly `repository@digest` for `platform` (os/arch[/variant])."""
    os_name, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    if not os_name or not arch:
        raise EngineError(f"The platform {platform!r} is not OS/ARCH[/VARIANT].")
    query = {"reference": f"{repository}@{digest}", "os": os_name, "arch": arch}
    if variant:
        query["variant"] = variant
    # Always ask the registry: an image already held is no proof the registry has it.
    return {**query, "policy": "always", **tls_query(repository)}


def pulled_id(events: Sequence[JSONObject], reference: str) -> str:
    """The image Podman's pull ended with (its last event names it)."""
    for event in reversed(events):
        found = event.get("id")
        if isinstance(found, str) and found:
            return found if found.startswith("sha256:") else f"sha256:{found}"
    raise EngineError(f"Podman's pull of {reference} named no image: {list(events)[-3:]!r}")
