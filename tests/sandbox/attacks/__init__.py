"""The attack corpus (issue 10): hostile scripts as data, each run through the checker
and, with the checker bypassed, in both sandboxes (``test_corpus``)."""

from __future__ import annotations

from .checker_attacks import CHECKER
from .corpus import CLASSES, Attack
from .docker_attacks import DOCKER
from .process_attacks import PROCESS
from .protocol_attacks import PROTOCOL
from .runtime_attacks import RUNTIME

ATTACKS: list[Attack] = [*CHECKER, *RUNTIME, *PROTOCOL, *PROCESS, *DOCKER]

__all__ = ["ATTACKS", "CLASSES", "Attack"]
