"""The Engine API calls behind egress: networks, and a container's logs.

A mixin of `DockerEngine`, kept in its own file so the network calls read as one
group (and other engines' clients can take them as they are).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

from pybox._core.errors import EngineError
from pybox._engine.interface import JSONObject
from pybox._engine.plumbing import EngineHTTP

LOGS_MAX_BYTES = 32 * 1024 * 1024


class NetworkCalls(EngineHTTP):
    def create_network(self, name: str, body: JSONObject) -> str:
        result = self._call("POST", "/networks/create", body={"Name": name, **body})
        network_id = self._field(result, "Id")
        if not isinstance(network_id, str) or not network_id:
            raise EngineError(f"The engine created network {name} but returned no ID: {result!r}")
        return network_id

    def inspect_network(self, network: str) -> JSONObject | None:
        result: JSONObject | None = self._call("GET", f"/networks/{network}", answers={404: None})
        return result

    def remove_network(self, network: str) -> bool:
        """False when it was already gone."""
        result = self._call(
            "DELETE", f"/networks/{network}", ok=(200, 204), answers={404: False}, parse=False
        )
        return result is not False

    def list_networks(self, labels: Mapping[str, str | None]) -> list[JSONObject]:
        label_filter = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        result = self._call(
            "GET", "/networks", query={"filters": json.dumps({"label": label_filter})}
        )
        if not isinstance(result, list):
            raise EngineError(f"The engine's network list is not a list: {result!r}")
        return result

    def container_stdout(self, container_id: str, since_epoch: int = 0) -> bytes:
        """A non-TTY container's stdout since `since_epoch` (whole seconds, as the
        engine filters; 0: all), demultiplexed, bounded."""
        raw = self._call(
            "GET",
            f"/containers/{container_id}/logs",
            query={"stdout": "1", "stderr": "0", "since": str(int(since_epoch))},
            parse=False,
            max_body_bytes=LOGS_MAX_BYTES,
        )
        return demultiplex(bytes(raw), source=1)


def demultiplex(raw: bytes, source: int) -> bytes:
    """The frames of one stream out of the engine's 8-byte-header framing."""
    out = bytearray()
    at = 0
    while at + 8 <= len(raw):
        kind, size = raw[at], struct.unpack(">I", raw[at + 4 : at + 8])[0]
        if kind == source:
            out += raw[at + 8 : at + 8 + size]
        at += 8 + size
    return bytes(out)
