"""Model backends: one interface, an OpenAI-compatible HTTP adapter, a JSONL replayer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from orchestrator.models.base import PURPOSES, ModelBackend, ModelEndpointError
    from orchestrator.models.extract import extract_script
    from orchestrator.models.openai_chat import OpenAIChatBackend
    from orchestrator.models.progress import Waiting
    from orchestrator.models.recorded import RecordedBackend, RecordedOutput, parse_jsonl
    from orchestrator.models.spec import backend_from_spec

__all__ = [
    "PURPOSES",
    "ModelBackend",
    "ModelEndpointError",
    "OpenAIChatBackend",
    "RecordedBackend",
    "RecordedOutput",
    "Waiting",
    "backend_from_spec",
    "extract_script",
    "parse_jsonl",
]
__getattr__ = lazy_exports(__name__, __file__)
