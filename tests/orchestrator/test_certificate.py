from __future__ import annotations

from dataclasses import replace

from broker.identity import Identity
from broker.records import SlotRecord
from orchestrator.certificate import build_certificate, verify


def slots() -> list[SlotRecord]:
    return [SlotRecord("r", Identity("orchestrate/#0", (i,), 0), "image.generate", f"d{i}",
                       "fp", {"n": i}) for i in range(3)]


def test_certificate_is_order_independent_and_verifies() -> None:
    cert = build_certificate(slots())
    assert build_certificate(reversed(slots())).digest == cert.digest
    assert verify(cert.digest, list(cert.entries), slots()).differences == ()


def test_verification_names_changed_missing_and_added_entries() -> None:
    cert = build_certificate(slots())
    tampered = slots()
    tampered[0] = replace(tampered[0], result={"n": 99})
    tampered.pop(1)
    tampered.append(SlotRecord("r", Identity("orchestrate/#1", (), 0), "text.generate", "x",
                               "fp", {}))
    kinds = sorted(d["kind"] for d in verify(cert.digest, list(cert.entries),
                                             tampered).differences)
    assert kinds == ["added", "changed", "missing"]
