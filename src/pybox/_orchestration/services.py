"""What pybox's own local services (the CLI's pool service) take from the host
layer: owner-only unix sockets and the kernel's word on who connected. Front
ends reach adapters only through orchestration; keepers use the same code."""

from __future__ import annotations

from pybox._adapters.unix_listener import listen_owner_only, peer_credentials

__all__ = ["listen_owner_only", "peer_credentials"]
