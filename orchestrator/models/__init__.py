"""Model backends: one interface, an OpenAI-compatible HTTP adapter, a JSONL replayer."""

from orchestrator.models.base import (
    PURPOSES,
    ModelBackend,
    ModelEndpointError,
    backend_from_spec,
)
from orchestrator.models.extract import extract_script
from orchestrator.models.openai_chat import OpenAIChatBackend
from orchestrator.models.progress import Waiting
from orchestrator.models.recorded import RecordedBackend, RecordedOutput, parse_jsonl

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
