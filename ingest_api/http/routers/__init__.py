"""Every HTTP router of the node: thin handlers over the node's public services (`deps`, `v3_resources`:
what they share)."""
