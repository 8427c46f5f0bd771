"""What `revise show` and `revise report` say about a run, as JSON-able dicts."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from broker.artifacts import ArtifactStore
from broker.catalog import CATALOG
from broker.charging import counts_as_paid
from broker.errors import ReviseError, RunNotFound
from broker.identity import Identity
from broker.records import (
    OPEN_ATTEMPT_STATUSES,
    RECONCILABLE_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    RevisionRecord,
    SlotRecord,
)
from broker.store import RunStore


def _summary(slot: SlotRecord) -> str:
    result = slot.result
    if isinstance(result, dict) and isinstance(result.get("artifact"), dict):
        art = result["artifact"]
        return f"{art.get('media_type')} {art.get('id', '')[:19]}… ({art.get('bytes')} B)"
    text = json.dumps(result, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _cost(attempts: Iterable[AttemptRecord]) -> float:
    """The unit prices of the attempts the provider may have charged for: a refusal its
    terms make free, or a request that never left, costs nothing
    (``broker.charging.counts_as_paid``)."""
    return round(sum(CATALOG[a.capability].unit_price for a in attempts
                     if a.capability in CATALOG and counts_as_paid(a)), 6)


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


def run_not_found(run_id: str) -> RunNotFound:
    return RunNotFound(f"no run {run_id!r} in this run store; `revise runs` lists the known "
                       "runs (a run submitted to a deployment appears once a dispatcher takes "
                       "its job)", run_id=run_id)


def describe_run(store: RunStore, run_id: str, *, artifacts_in: str | None = None
                 ) -> dict[str, Any]:
    """``artifacts_in`` names the artifact store (the settings' one) for the listing."""
    run = store.get_run(run_id)
    if run is None:
        raise run_not_found(run_id)
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
        "attempts_open": [{"id": a.id, "number": a.number, "identity": str(a.identity),
                           "status": str(a.status), "owner": a.owner} for a in attempts
                          if a.status in RECONCILABLE_ATTEMPT_STATUSES],
        "events": [{"time": e.created_at.isoformat(), "revision": e.revision, "kind": e.kind,
                    "identity": e.identity, "message": e.message} for e in events],
    }


# ---- the run report page (`revise report R --html`): describe_run plus what a reader needs --


def _identity_text(item: dict[str, Any]) -> str:
    return str(Identity(item["site"], tuple(item["path"]), item["occurrence"]))


def _price(capability: str) -> float:
    return CATALOG[capability].unit_price if capability in CATALOG else 0.0


def _paid_by_call(attempts: Iterable[AttemptRecord]) -> dict[tuple[str, int], float]:
    """(identity, revision) -> what its attempts cost: the store's attempts say what the
    provider may have charged, whatever an older run report recorded."""
    paid: dict[tuple[str, int], float] = {}
    for attempt in attempts:
        key = (str(attempt.identity), attempt.revision)
        paid[key] = round(paid.get(key, 0.0) + (_price(attempt.capability)
                                                 if counts_as_paid(attempt) else 0.0), 6)
    return paid


def _matrix(revisions: list[RevisionRecord], slots: list[SlotRecord],
            attempts: list[AttemptRecord]) -> list[dict[str, Any]]:
    """One row per identity any revision touched; one cell per revision (outcome, cost);
    an attempt a crash left open shows as ``unresolved`` in its revision."""
    rows: dict[str, dict[str, Any]] = {}
    paid = _paid_by_call(attempts)

    def row(identity: str, capability: str) -> dict[str, Any]:
        return rows.setdefault(identity, {"identity": identity, "capability": capability,
                                          "cells": {}, "committed_by": None, "result": None})

    for rev in revisions:
        summary = rev.summary or {}
        for item in summary.get("identities") or []:
            identity = _identity_text(item)
            row(identity, item["capability"])["cells"][rev.revision] = {
                "outcome": item["outcome"], "cost": paid.get((identity, rev.revision), 0.0),
                "replayed_from": item.get("replayed_from")}
        for orphan in summary.get("orphans") or []:
            cells = row(orphan["identity"], "")["cells"]
            cells.setdefault(rev.revision, {"outcome": "orphaned", "cost": 0.0,
                                            "replayed_from": None})
    for attempt in attempts:
        if attempt.status in OPEN_ATTEMPT_STATUSES:
            row(str(attempt.identity), attempt.capability)["cells"].setdefault(
                attempt.revision, {"outcome": "unresolved", "cost": _price(attempt.capability),
                                   "replayed_from": None})
    for slot in slots:
        entry = row(str(slot.identity), slot.capability)
        entry.update(capability=slot.capability, committed_by=slot.revision,
                     result=_summary(slot))
    return sorted(rows.values(), key=lambda r: r["identity"])


def _source_line(text: str, line: int | None) -> str | None:
    lines = text.splitlines()
    return lines[line - 1].strip() if line and 0 < line <= len(lines) else None


def _counterexamples(revisions: list[RevisionRecord], slots: list[SlotRecord]
                     ) -> list[dict[str, Any]]:
    """The gate's counterexamples of every revision, with the candidate's source line and
    the committed call's line in the revision that committed it."""
    by_revision = {r.revision: r for r in revisions}
    committed: dict[str, SlotRecord] = {}
    for slot in sorted(slots, key=lambda s: -s.revision):  # the first commit of each site
        committed[slot.identity.site] = slot
    out = []
    for rev in revisions:
        for ce in ((rev.summary or {}).get("gate") or {}).get("counterexamples") or []:
            first = committed.get(ce["site"])
            origin = by_revision.get(first.revision) if first is not None else None
            out.append({**ce, "revision": rev.revision,
                        "source": _source_line(rev.source_text, ce.get("line")),
                        "committed_revision": None if first is None else first.revision,
                        "committed_source": None if origin is None or first is None
                        else _source_line(origin.source_text,
                                          ce.get("committed_line") or first.line)})
    return out


REFUSED_CANDIDATE_EVENTS = frozenset({"repair_refused", "repair_runtime_refused"})


def _refused_candidates(events: Iterable[Any]) -> list[dict[str, Any]]:
    """Every repair candidate that was refused (by the checker, the gate, the call-count
    guard, or stopped at runtime): refused ones never became revisions, so the run's
    events are their only record."""
    out = []
    for event in events:
        if event.kind not in REFUSED_CANDIDATE_EVENTS:
            continue
        data = event.data or {}
        run = data.get("run") or {}
        out.append({"time": event.created_at.isoformat(), "attempt": data.get("attempt"),
                    "stage": data.get("stage") or "?",
                    "revision": run.get("revision") if isinstance(run, dict) else None,
                    "rules": sorted({str(v.get("rule")) for v in data.get("violations") or []
                                     if isinstance(v, dict)}),
                    "counterexamples": [f"{c.get('kind')} {c.get('site')}"
                                        for c in data.get("counterexamples") or []
                                        if isinstance(c, dict)],
                    "message": event.message})
    return out


def reconcile_commands(run_id: str, identity: str) -> list[str]:
    """The exact commands an operator runs to decide an unresolved attempt."""
    base = f"revise reconcile {shlex.quote(run_id)} {shlex.quote(identity)}"
    return [f"{base} --result known.json --operator NAME --reason 'the provider shows it'",
            f"{base} --abandon --operator NAME --reason 'the provider has no record'"]


def _rerun_cost(revisions: list[RevisionRecord], attempts: list[AttemptRecord]) -> float:
    """What the revisions would have paid run from scratch: every call they executed or
    replayed, paid; a failed one at what its attempts cost (nothing when the provider
    refused it free)."""
    paid = _paid_by_call(attempts)
    total = 0.0
    for rev in revisions:
        for item in (rev.summary or {}).get("identities") or []:
            if item["outcome"] in ("executed", "replayed"):
                total += _price(item["capability"])
            elif item["outcome"] == "failed":
                total += paid.get((_identity_text(item), rev.revision), 0.0)
    return round(total, 6)


EMBEDDABLE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def embed_images(view: dict[str, Any], artifacts: ArtifactStore, *,
                 per_image: int = 4 << 20, total: int = 32 << 20) -> None:
    """Put each committed image of ``view["artifacts"]`` into it as a ``data:`` URI, so the
    HTML report shows the pictures offline. Other media types, images over ``per_image``
    bytes and any past ``total`` keep only their fetch command; a missing one says so."""
    import base64

    left = total
    for art in view.get("artifacts", []):
        size = art.get("bytes") if isinstance(art.get("bytes"), int) else per_image + 1
        if art.get("media_type") not in EMBEDDABLE_IMAGES or size > min(per_image, left):
            continue
        try:
            data = artifacts.get(art["id"])
        except ReviseError:
            art["missing"] = True
            continue
        left -= len(data)
        art["data_uri"] = (f"data:{art['media_type']};base64,"
                           + base64.b64encode(data).decode("ascii"))


def report_view(store: RunStore, run_id: str) -> dict[str, Any]:
    """``describe_run`` plus the revisions side by side, the gate's counterexamples with
    their source lines, open attempts with their reconcile commands, spend against a full
    rerun and the certificate check: everything the HTML report shows."""
    from orchestrator.certificate import verify

    view = describe_run(store, run_id)
    revisions = store.list_revisions(run_id)
    slots = [s for s in store.list_slots(run_id) if s.capability in CATALOG]
    persisted = store.latest_certificate(run_id)
    certificate = None
    if persisted is not None:  # over every committed slot, race decisions included
        checked = verify(persisted.digest, persisted.entries, store.list_slots(run_id))
        certificate = {"revision": persisted.revision, "persisted_digest": persisted.digest,
                       **checked.to_json()}
    for attempt in view["attempts_open"]:
        attempt["commands"] = reconcile_commands(run_id, attempt["identity"])
    attempts = store.list_attempts(run_id)
    spent = view["spend"]["cost"]
    rerun = _rerun_cost(revisions, attempts)
    return view | {
        "matrix": _matrix(revisions, slots, attempts),
        "counterexamples": _counterexamples(revisions, slots),
        "refused_candidates": _refused_candidates(store.list_events(run_id)),
        "rerun": {"cost": rerun, "saved": round(max(rerun - spent, 0.0), 6)},
        "certificate": certificate,
    }
