"""The host side: the checker, callsites, the gate, admission, one revision's pipeline
and session, the report and its certificate, the repair loop, and the host's commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from orchestrator.admission import Admission, admit
    from orchestrator.certificate import Certificate, verify
    from orchestrator.checker import CheckReport, check
    from orchestrator.embedded import Services, open_services
    from orchestrator.gate import GateResult, check_gate
    from orchestrator.pipeline import Pipeline
    from orchestrator.repair import repair_dynamic_source
    from orchestrator.report import RunReport
    from orchestrator.sites import Site, assign_sites
    from orchestrator.source import Source, decode_source

__all__ = [
    "Admission",
    "Certificate",
    "CheckReport",
    "GateResult",
    "Pipeline",
    "RunReport",
    "Services",
    "Site",
    "Source",
    "admit",
    "assign_sites",
    "check",
    "check_gate",
    "decode_source",
    "open_services",
    "repair_dynamic_source",
    "verify",
]
__getattr__ = lazy_exports(__name__, __file__)
