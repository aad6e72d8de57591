"""The Schema Registry on a node: reads from the node's metadata image, writes through the controller.

Reads (`state`) are served from this node's own image — every node has the whole registry.
Writes go to the active controller (`Node.controller_call`, forwarded when it is elsewhere), which
validates them against its image and proposes metadata records; the answer comes once this node
has applied them too, so a client reads its own write from the node it wrote through. Concurrency:
called from the event loop only.
"""

from __future__ import annotations

from typing import Any

from lakelog.ingest_api.errors import LeaderNotAvailableError
from lakelog.ingest_api.schemas.state import SchemaRegistryState


class SchemaRegistry:
    """The registry's node side; the router's only way in."""

    def __init__(self, node: Any) -> None:
        self.node = node

    @property
    def state(self) -> SchemaRegistryState:
        self.node.check_ready()
        return self.node.image.schemas  # an immutable value: this read is consistent

    async def write(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one registry write on the active controller; its result once applied here."""
        self.node.check_ready()
        result = await self.node.controller_call(op, args)
        offset = int(result.pop("metadata_offset", 0))
        timeout_s = self.node.config.request_timeout_ms / 1000
        if not await self.node.metadata_waiters.wait(offset, timeout_s):
            raise LeaderNotAvailableError(f"the registry change at metadata offset {offset} is committed but not "
                                          f"applied on this node yet; retry the read")
        return result
