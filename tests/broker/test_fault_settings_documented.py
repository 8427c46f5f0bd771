"""The outage and liveness settings each have a README settings row whose default is the
real one (``broker.settings.Settings`` / ``workers.config.WorkerSettings``)."""

from __future__ import annotations

import re
from pathlib import Path

from broker.settings import Settings
from workers.config import WorkerSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
ROWS = {m[0]: m[1] for m in re.findall(r"^\| `(REVISE_[A-Z0-9_]+)` \| ([^|]+) \|", README,
                                       re.MULTILINE)}


def test_each_outage_setting_has_a_row_with_its_real_default() -> None:
    fields = {**{f"REVISE_{n.upper()}": f for n, f in Settings.model_fields.items()},
              **{f"REVISE_CELERY_{n.upper()}": f for n, f in WorkerSettings.model_fields.items()}}
    ours = ["REVISE_ATTEMPT_LEASE_SECONDS", "REVISE_COMMIT_RETRY_SECONDS",
            "REVISE_REVISION_LEASE_SECONDS", "REVISE_REQUEUE_AFTER_SECONDS",
            "REVISE_MAX_REQUEUES", "REVISE_CELERY_RECONCILE_INTERVAL"]
    for name in ours:
        assert name in ROWS, f"{name} has no README settings row"
        assert float(ROWS[name].strip(" `")) == float(fields[name].default), name
