"""The Docker sandbox gives the same run JSON as the process sandbox (apart from timings)."""

from __future__ import annotations

import pytest

from .conftest import Harness

STORIES = {
    "e3": [("e3_v1", None), ("e3_v2", None), ("e3_v3", None)],
    "fanout": [("fanout_v1", {"shots": ["a", "b", "c", "d"]}),
               ("fanout_repaired", {"shots": ["a", "b", "c", "d"]}),
               ("fanout_relocated", {"shots": ["a", "b", "c", "d"]})],
    "divergence": [("payload_v1", None), ("payload_v2", None)],
    "orphans": [("shrink_v1", None), ("shrink_v2", None)],
}


def _normal(report: dict) -> dict:
    """Everything but which sandbox ran it (and the process sandbox's isolation warning)."""
    warnings = [w for w in report["warnings"] if "process sandbox" not in w]
    return {k: v for k, v in report.items() if k not in {"sandbox"}} | {"warnings": warnings}


@pytest.fixture
def sandbox_kind() -> str:
    return "process"


@pytest.mark.docker
@pytest.mark.parametrize("story", sorted(STORIES))
def test_docker_and_process_sandboxes_agree(make_harness, story: str) -> None:
    process: Harness = make_harness(home="process")
    from .conftest import _runner

    docker: Harness = make_harness(home="docker")
    docker.services.runner = _runner("docker", docker.services.settings)
    docker.pipeline = docker.services.pipeline()
    for name, args in STORIES[story]:
        expected = process.run(name, args=args)
        got = docker.run(name, args=args)
        if expected["sandbox"] is not None:  # a refused candidate never reaches a sandbox
            assert (got["sandbox"], expected["sandbox"]) == ("docker", "process")
        assert _normal(got) == _normal(expected), name
