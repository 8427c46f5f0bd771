"""What `revise show` reports about a run, as one JSON-able dict."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from broker.catalog import CATALOG
from broker.errors import RunNotFound
from broker.records import OPEN_ATTEMPT_STATUSES, AttemptRecord, AttemptStatus, SlotRecord
from broker.store import RunStore


def _summary(slot: SlotRecord) -> str:
    result = slot.result
    if isinstance(result, dict) and isinstance(result.get("artifact"), dict):
        art = result["artifact"]
        return f"{art.get('media_type')} {art.get('id', '')[:19]}… ({art.get('bytes')} B)"
    text = json.dumps(result, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _cost(attempts: Iterable[AttemptRecord]) -> float:
    """Every dispatch attempt is paid, rejected ones included (as providers bill them)."""
    return round(sum(CATALOG[a.capability].unit_price for a in attempts
                     if a.capability in CATALOG), 6)


def relocations_of(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The remaps a revision's gate made: each committed site and the site now standing for it."""
    gate = (summary or {}).get("gate") or {}
    return [dict(r) for r in gate.get("relocations") or []]


def _artifacts(slots: Iterable[SlotRecord], where: str | None) -> list[dict[str, Any]]:
    """Every artifact a committed call produced, with how to fetch its bytes."""
    found: dict[str, dict[str, Any]] = {}
    for slot in slots:
        art = slot.result.get("artifact") if isinstance(slot.result, dict) else None
        if isinstance(art, dict) and isinstance(art.get("id"), str):
            found.setdefault(art["id"], {
                "id": art["id"], "uri": art.get("uri"), "media_type": art.get("media_type"),
                "bytes": art.get("bytes"), "identity": str(slot.identity), "store": where,
                "fetch": f"revise artifact get {art['id']} -o FILE"})
    return list(found.values())


def describe_run(store: RunStore, run_id: str, *, artifacts_in: str | None = None
                 ) -> dict[str, Any]:
    """``artifacts_in`` names the artifact store (the settings' one) for the listing."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r}; `revise runs` lists the known runs",
                          run_id=run_id)
    revisions = store.list_revisions(run_id)
    slots = [s for s in store.list_slots(run_id) if s.capability in CATALOG]
    attempts = store.list_attempts(run_id)
    events = store.list_events(run_id)
    replays = sum(((r.summary or {}).get("calls") or {}).get("replayed", 0) for r in revisions)
    return {
        "run": {"run_id": run.run_id, "status": str(run.status), "detail": run.detail,
                "revisions": run.revisions, "created_at": run.created_at.isoformat()},
        "spend": {
            "attempts": len(attempts),
            "succeeded": sum(1 for a in attempts if a.status is AttemptStatus.SUCCEEDED),
            "cost": _cost(attempts),
            "replays": replays,
        },
        "revisions": [{"revision": r.revision, "status": r.status,
                       "source_digest": r.source_digest, "created_at": r.created_at.isoformat(),
                       "calls": (r.summary or {}).get("calls"),
                       "cost": _cost(a for a in attempts if a.revision == r.revision),
                       "error": (r.summary or {}).get("error"),
                       "relocations": relocations_of(r.summary)} for r in revisions],
        "slots": [{"identity": str(s.identity), "capability": s.capability,
                   "revision": s.revision, "digest": s.digest, "cost": s.cost,
                   "result_summary": _summary(s)} for s in slots],
        "artifacts": _artifacts(slots, artifacts_in),
        "attempts_open": [{"id": a.id, "identity": str(a.identity), "status": str(a.status),
                           "owner": a.owner} for a in attempts
                          if a.status in OPEN_ATTEMPT_STATUSES],
        "events": [{"time": e.created_at.isoformat(), "revision": e.revision, "kind": e.kind,
                    "identity": e.identity, "message": e.message} for e in events],
    }
