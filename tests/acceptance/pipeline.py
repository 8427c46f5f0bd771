"""End-to-end checks of the host side of the sandbox socket that are not attacks: the output
cap, the envelope's concurrency limit and an artifact's way out, each a script run with
the checker bypassed through the embedded pipeline. (Forged frames, unknown sites and
oversized messages are attacks of the corpus: ``--attacks`` runs them.)"""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from broker.envelope import Envelope, SandboxLimits
from broker.providers.log import ProviderLog
from broker.settings import SandboxKind, Settings
from tests.sandbox.attacks.harness import run_unchecked

Result = tuple[str, bool, str]  # (check name, passed, detail)


@dataclass(frozen=True)
class PipelineCheck:
    name: str
    body: str  # the body of orchestrate
    passes: Callable[[dict[str, Any], Any], bool]  # (run report, services)
    limits: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 4
    latency: float = 0.0  # seconds the local provider takes per call


def _provider_lines(services: Any) -> list[dict[str, Any]]:
    """One entry per dispatch (ProviderLog.read: intent and outcome lines folded)."""
    return ProviderLog(services.settings.provider_log_path).read()


def _in_flight_held(report: dict[str, Any], services: Any) -> bool:
    """Three one-second calls under concurrency 2: the third finished a second later."""
    stamps = sorted(datetime.fromisoformat(entry["ts"]) for entry in _provider_lines(services))
    return (report.get("status") == "succeeded" and len(stamps) == 3
            and (stamps[2] - stamps[0]).total_seconds() >= 0.8)


def _artifact_exported(report: dict[str, Any], services: Any) -> bool:
    result = report.get("result")
    return bool(result) and services.artifacts.get(result["id"]).startswith(b"\x89PNG")


PIPELINE_CHECKS = [
    PipelineCheck("output size cap", 'return "x" * 20000',
                  lambda r, s: (r.get("error") or {}).get("type") == "OutputTooLarge",
                  limits={"output_bytes": 4096}),
    PipelineCheck("concurrency limit held", '''
        async def say(i):
            return await ctx.run("text.generate", {"prompt": f"x{i}"})
        return await ctx.parallel([say(i) for i in range(3)])
        ''', _in_flight_held, concurrency=2, latency=1.0),
    PipelineCheck("artifact export", '''
        image = await ctx.run("image.generate", {"prompt": "acceptance"})
        return image["artifact"]
        ''', _artifact_exported),
]


def _script(body: str) -> str:
    return "async def orchestrate(ctx, args):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _one(check: PipelineCheck, run_settings: Settings, run_id: str) -> tuple[bool, str]:
    from orchestrator.embedded import open_services
    from sandbox.select import select_runner

    services = open_services(run_settings, runner=select_runner(run_settings),
                             latency=check.latency)
    envelope = Envelope(concurrency=check.concurrency, sandbox=SandboxLimits(
        **{"timeout_seconds": 30.0, **check.limits}))
    try:
        report = run_unchecked(services, run_id, _script(check.body), {}, envelope)
        return bool(check.passes(report, services)), (report.get("error") or {}).get(
            "message", "")
    finally:
        services.close()


def run_pipeline_checks(kind: str, settings: Settings | None = None, *,
                        only: str | None = None) -> list[Result]:
    base = settings or Settings()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="revise-acceptance-") as tmp:
        for index, check in enumerate(PIPELINE_CHECKS):
            name = f"{kind} pipeline: {check.name}"
            if only and only not in name:
                continue
            run_settings = base.model_copy(update={
                "home": Path(tmp) / f"check{index}", "database_url": None,
                "sandbox": SandboxKind(kind)})
            try:
                ok, detail = _one(check, run_settings, f"acceptance-{index}")
            except Exception as exc:  # a check that crashes is a failed check
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            results.append((name, ok, detail[:70]))
    return results
