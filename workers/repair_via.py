"""Where `revise repair --execute` runs an accepted candidate (``REVISE_REPAIR_VIA``).

The model is asked and every candidate is checked and gated here, on the host
that asks (nothing is spent before a candidate is admitted). An admitted one
then runs either embedded (``open_services``: this process, its sandbox) or,
on a deployment, through the queue: submitted to the dispatcher like
``revise submit``, run by the sandbox and broker workers under their limits,
and waited for like ``--wait``. Both give the loop the same run JSON, so the
repair report is the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.envelope import Envelope
from broker.errors import QueueError
from broker.settings import RepairVia, Settings
from broker.store import RunStore


class RepairTarget:
    """The run store the loop reads and the way it runs a candidate on run ``run_id``."""

    def __init__(self, settings: Settings, *, timeout: float = 900.0) -> None:
        self.via = settings.resolved_repair_via
        self.timeout = timeout
        self._client: Any = None
        self._services: Any = None
        if self.via is RepairVia.QUEUE:
            from workers.client import Client

            self._client = Client(settings)
        else:
            from orchestrator.embedded import open_services

            self._services = open_services(settings)

    @property
    def store(self) -> RunStore:
        return self._client.store if self._client is not None else self._services.store

    def run(self, run_id: str, text: str, args: Any, envelope: Envelope) -> Mapping[str, Any]:
        if self._client is None:
            return self._services.pipeline().run(run_id, text, args, envelope).to_json()
        handle = self._client.submit(text, args, envelope, run_id)
        try:
            return handle.wait(self.timeout)
        except TimeoutError as exc:
            raise QueueError(f"{exc}; the candidate keeps running on the workers (raise "
                             "--timeout to wait longer)", job_id=handle.job_id) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._services is not None:
            self._services.close()
