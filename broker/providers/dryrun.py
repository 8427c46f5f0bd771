"""Synthetic answers for catalog-only capabilities (video, audio, edits).

Nothing is generated and nothing is charged: the result is a deterministic
placeholder marked ``"dry_run": true`` so a script's control flow can be
exercised. Whether a real run may reach this provider is the broker's call.
"""

from __future__ import annotations

from broker import png
from broker.artifacts import ArtifactStore
from broker.catalog import Capability
from broker.identity import payload_digest
from broker.providers.base import CallContext, ProviderResult


class DryRunProvider:
    name = "dry-run"
    sends_idempotency_key = False

    def __init__(self, artifacts: ArtifactStore | None = None) -> None:
        self.artifacts = artifacts

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        digest = payload_digest(payload)
        result = {"dry_run": True, "capability": capability.name, "digest": digest,
                  "summary": f"dry run: {capability.name} was not executed"}
        if self.artifacts is not None and capability.name.startswith("image."):
            # A real placeholder image keeps pipelines that pass images along working.
            data = png.render(f"dry-run\0{capability.name}\0{digest}".encode(), 16)
            result["artifact"] = self.artifacts.put(data, png.MEDIA_TYPE).to_json()
        return ProviderResult(result=result, usage={"dry_run_calls": 1}, cost=0.0)
