"""A run's rows as JSON and back: what a golden record holds and how a test loads it.

A record keeps every row the run store holds for one run (runs, revisions, blobs, jobs,
slots, attempts, certificates, orphans, events), column by column as the tables define
them (times as ISO 8601, bytes as base64), and what was computed from them when the run
was recorded: the certificate digest of its committed calls and ``revise report --json``.
"""

from __future__ import annotations

import base64
import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import LargeBinary, Table, insert, select

from broker.models import (
    UTCDateTime,
    attempts,
    blobs,
    certificates,
    events,
    jobs,
    orphans,
    revisions,
    runs,
    slots,
)
from broker.sqlstore import SqlStore
from orchestrator.certificate import build_certificate
from orchestrator.inspect import report_view

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
TABLES: tuple[Table, ...] = (runs, revisions, blobs, jobs, slots, attempts, certificates,
                             orphans, events)  # in the order their foreign keys allow


def _dumped(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for column in table.columns:
        value = row[column.name]
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, bytes | memoryview):
            value = base64.b64encode(bytes(value)).decode("ascii")
        out[column.name] = value
    return out


def _loaded(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for column in table.columns:
        value = out.get(column.name)
        if value is None:
            continue
        if isinstance(column.type, UTCDateTime):
            out[column.name] = datetime.fromisoformat(value)
        elif isinstance(column.type, LargeBinary):
            out[column.name] = base64.b64decode(value)
    return out


def as_json(value: Any) -> Any:
    """A computed view as it reads back from JSON (tuples become lists, and so on)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def dump_run(store: SqlStore, run_id: str, name: str, about: str) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {}
    with store.engine.connect() as conn:
        for table in TABLES:
            key = [c for c in table.primary_key.columns]
            found = conn.execute(select(table).where(table.c.run_id == run_id)
                                 .order_by(*key)).mappings().all()
            rows[table.name] = [_dumped(table, dict(r)) for r in found]
    return {"name": name, "about": about, "run_id": run_id, "rows": rows,
            "expected": expected_of(store, run_id)}


def expected_of(store: SqlStore, run_id: str) -> dict[str, Any]:
    """What the record promises: computed from the store, never copied from a row."""
    return {"certificate_digest": build_certificate(store.list_slots(run_id)).digest,
            "report": as_json(report_view(store, run_id))}


def load_run(store: SqlStore, record: dict[str, Any]) -> None:
    """Insert the record's rows into ``store`` (a fresh one), as they were."""
    with store.engine.begin() as conn:
        for table in TABLES:
            loaded = [_loaded(table, row) for row in record["rows"][table.name]]
            if loaded:
                conn.execute(insert(table), loaded)


def read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    return data


def write(record: dict[str, Any]) -> Path:
    path = GOLDEN / f"{record['name']}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def tampered(record: dict[str, Any], table: str, index: int, **changes: Any
             ) -> dict[str, Any]:
    """A copy of ``record`` with one row changed (``gone=True``: the row removed)."""
    changed = copy.deepcopy(record)
    rows = changed["rows"][table]
    if changes.pop("gone", False):
        del rows[index]
    else:
        rows[index] |= changes
    return changed
