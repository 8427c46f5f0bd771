"""The Celery deployment: the app, one module per worker role, the queue client, and the
`revise` program (``workers.cli``), which composes every layer's commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from workers.app import make_app
    from workers.client import Client
    from workers.config import WorkerSettings

__all__ = [
    "Client",
    "WorkerSettings",
    "make_app",
]
__getattr__ = lazy_exports(__name__, __file__)
