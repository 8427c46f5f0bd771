"""`revise demo`: the four-shot story end to end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from orchestrator.demo.run import run_demo

__all__ = [
    "run_demo",
]
__getattr__ = lazy_exports(__name__, __file__)
