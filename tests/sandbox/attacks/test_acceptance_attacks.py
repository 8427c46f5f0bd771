"""`python -m tests.acceptance --attacks`: the corpus subset the acceptance run carries."""

from __future__ import annotations

import pytest

from tests.acceptance.attacks import ACCEPTANCE, acceptance_attacks
from tests.acceptance.probes import PROBES
from tests.sandbox.test_acceptance import acceptance

from . import ATTACKS


def test_every_process_sandbox_attack_check_passes(process_python) -> None:
    assert acceptance("--attacks", "--runner", "process", "--only", "attack:") == len(ACCEPTANCE)


@pytest.mark.docker
def test_every_docker_attack_check_passes(sandbox_settings) -> None:
    assert acceptance("--attacks", "--runner", "docker", "--only", "attack:") == len(ACCEPTANCE)


def test_the_acceptance_attacks_are_the_corpus_own() -> None:
    """One copy of each attack: the acceptance run names corpus attacks, it has none of its
    own, and it covers every class the sandbox alone must hold against."""
    chosen = acceptance_attacks()
    assert all(any(attack is corpus for corpus in ATTACKS) for attack in chosen)
    assert len(set(ACCEPTANCE)) == len(ACCEPTANCE) >= 20
    assert {attack.kind for attack in chosen} >= {"process", "protocol", "docker", "checker"}
    assert not any("attack:" in probe.name for probe in PROBES)
