"""Every attack twice: through the checker, and with the checker bypassed in both
sandboxes (one services object per sandbox for the module; a normal run after each
attack proves the host still works)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from broker.settings import SandboxKind, Settings
from orchestrator.checker import check
from orchestrator.embedded import open_services
from orchestrator.source import decode_source

from . import ATTACKS, CLASSES
from .harness import ENV_SECRET, SECRET_ENV_NAMES, Canary, Victim, containers_left, run_attack

_IDS = [f"{a.kind}-{a.name}" for a in ATTACKS]


def test_the_corpus_is_large_and_covers_every_class() -> None:
    counts = Counter(a.kind for a in ATTACKS)
    assert len(ATTACKS) >= 60, counts
    assert set(counts) == set(CLASSES), counts
    assert len({a.name for a in ATTACKS}) == len(ATTACKS), "attack names must be unique"


@pytest.fixture(scope="module")
def host_secrets():
    with pytest.MonkeyPatch.context() as patch:
        for name in SECRET_ENV_NAMES:
            patch.setenv(name, ENV_SECRET)
        yield


@pytest.fixture(scope="module")
def canary():
    opened = Canary()
    yield opened
    opened.close()


def _open(kind: str, home: Path, request: pytest.FixtureRequest):
    if kind == "docker":
        from sandbox.docker_runner import DockerRunner

        base = request.getfixturevalue("sandbox_settings")
        settings = base.model_copy(update={"home": home, "sandbox": SandboxKind.DOCKER})
        return open_services(settings, runner=DockerRunner(settings))
    from sandbox.runner import ProcessRunner

    settings = Settings(home=home, sandbox=SandboxKind.PROCESS)
    runner = ProcessRunner()
    runner.check()
    return open_services(settings, runner=runner)


@pytest.fixture(scope="module", params=["process", pytest.param("docker",
                                                                marks=pytest.mark.docker)])
def sandbox(request, tmp_path_factory, host_secrets):
    services = _open(request.param, tmp_path_factory.mktemp(f"home-{request.param}"), request)
    yield services
    services.close()
    if request.param == "docker":
        assert not containers_left(), "a container of this process was left behind"


@pytest.fixture(scope="module")
def process_services(tmp_path_factory, host_secrets, request):
    services = _open("process", tmp_path_factory.mktemp("home-checked"), request)
    yield services
    services.close()


@pytest.mark.parametrize("attack", ATTACKS, ids=_IDS)
def test_checker_rejects_or_accepts_only_harmless(attack, process_services, canary,
                                                  tmp_path) -> None:
    """`revise check`'s code path; an accepted attack must be harmless on the checked path."""
    report = check(decode_source(attack.script).text)
    if attack.checker == "reject":
        assert not report.valid, f"{attack.name} ({attack.tries}) passed the checker"
        return
    assert report.valid, report.violations
    verdict = run_attack(attack, process_services, checked=True,
                         victim=Victim(tmp_path / "victim"), canary=canary, slack=10.0)
    assert verdict.contained, (verdict.problems, verdict.report)


@pytest.mark.parametrize("attack", ATTACKS, ids=_IDS)
def test_contained_with_the_checker_bypassed(attack, sandbox, canary, tmp_path) -> None:
    slack = 20.0 if sandbox.runner.kind == "docker" else 10.0
    verdict = run_attack(attack, sandbox, checked=False, victim=Victim(tmp_path / "victim"),
                         canary=canary, slack=slack)
    assert verdict.contained, (verdict.problems, verdict.report)
    assert os.environ.get("REVISE_PROVIDER_API_KEY") == ENV_SECRET
