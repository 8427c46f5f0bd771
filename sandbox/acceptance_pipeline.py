"""End-to-end acceptance checks of the host side of the sandbox socket, through the pipeline.

Hostile scripts run with the checker bypassed (``run_unchecked``, the
test-only path): they reach real builtins and the runtime's own channel through
the runtime's globals, and forge messages; the host must stop them before any
provider call. ``python -m sandbox.acceptance --pipeline`` runs them.
"""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.envelope import SandboxLimits
from broker.providers.log import ProviderLog
from broker.settings import Settings

Result = tuple[str, bool, str]

# Real builtins through the runtime's own globals: the checker refuses this (R06),
# so only a script that got past it would try; the sandbox must hold anyway.
ESCAPE = '''
    g = CapabilityError.__init__.__globals__
    b = g["__builtins__"]
    real = b if isinstance(b, dict) else b.__dict__
    imp, open, OSError = real["__import__"], real["open"], real["OSError"]
    bytearray, type = real["bytearray"], real["type"]
    os = imp("os")
    json = imp("json")
'''


def script(body: str) -> str:
    return ("async def orchestrate(ctx, args):\n" + ESCAPE
            + textwrap.indent(textwrap.dedent(body), "    "))


def run_unchecked(services: Any, run_id: str, text: str, args: Any, envelope: Any
                  ) -> dict[str, Any]:
    """Annotate and gate but skip the checker: the test-only path to hostile scripts."""
    from orchestrator.admission import admit_unchecked
    from orchestrator.pipeline import Admitted, args_json
    from orchestrator.report import RunReport
    from orchestrator.source import decode_source

    store = services.store
    source = decode_source(text)
    store.ensure_run(run_id)
    admission = admit_unchecked(source, store.list_slots(run_id))
    revision = store.add_revision(run_id, source.text, source.digest)
    admitted = Admitted(run_id, revision, source, args_json(args, envelope), admission,
                        RunReport(run_id=run_id, revision=revision))
    return services.pipeline().execute(admitted, envelope).to_json()


def _error(report: dict[str, Any]) -> str:
    return (report.get("error") or {}).get("type", "")


def _provider_lines(services: Any) -> list[dict[str, Any]]:
    """One entry per dispatch (ProviderLog.read: intent and outcome lines folded)."""
    return ProviderLog(services.settings.provider_log_path).read()


def _stopped_by_rpc(report: dict[str, Any], services: Any) -> bool:
    return _error(report) == "SandboxProtocolError" and not _provider_lines(services)


def _in_flight_held(report: dict[str, Any], services: Any) -> bool:
    """Three one-second calls under concurrency 2: the third finished a second later."""
    from datetime import datetime

    stamps = sorted(datetime.fromisoformat(entry["ts"]) for entry in _provider_lines(services))
    return (report.get("status") == "succeeded" and len(stamps) == 3
            and (stamps[2] - stamps[0]).total_seconds() >= 0.8)


WHITELISTED = '''
        if args.get("never"):
            await ctx.run("text.generate", {"prompt": "whitelisted"})
        channel = g["_SCHEDULER"].channel
        nonce = g["_SCHEDULER"].nonce
        site = "orchestrate/if0/#0"
        def frame(seq, occurrence=0, path=()):
            return {"seq": seq, "kind": "call", "site": site, "path": list(path),
                    "occurrence": occurrence, "capability": "text.generate",
                    "payload": {"prompt": "x"}, "take": 1}'''

# (name, body, passes(report, services), limits, concurrency, latency)
PIPELINE_CHECKS: list[tuple[str, str, Callable[[dict[str, Any], Any], bool],
                            dict[str, Any], int, float]] = [
    ("output size cap", 'return "x" * 20000',
     lambda r, s: _error(r) == "OutputTooLarge", {"output_bytes": 4096}, 4, 0.0),
    ("socket nonce forgery rejected", WHITELISTED + '''
        channel.send({"t": "batch", "nonce": "forged", "frames": [frame(1)]})
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("socket unknown site rejected", '''
        run = ctx.run
        return await run("text.generate", {"prompt": "x"}, _site="forged/#0")
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("socket occurrence replay rejected", WHITELISTED + '''
        channel.send({"t": "batch", "nonce": nonce, "frames": [frame(1), frame(2)]})
        imp("time").sleep(5)
        return "replayed"
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("oversized message rejected", WHITELISTED + '''
        channel.send({"t": "batch", "nonce": nonce, "frames": [], "pad": "x" * 9000000})
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("concurrency limit held", '''
        async def say(i):
            return await ctx.run("text.generate", {"prompt": f"x{i}"})
        return await ctx.parallel([say(i) for i in range(3)])
        ''', _in_flight_held, {}, 2, 1.0),
    ("artifact export", '''
        image = await ctx.run("image.generate", {"prompt": "acceptance"})
        return image["artifact"]
        ''', lambda r, s: bool(r.get("result")) and s.artifacts.get(
            r["result"]["id"]).startswith(b"\x89PNG"), {}, 4, 0.0),
]


def run_pipeline_checks(kind: str, settings: Settings | None = None) -> list[Result]:
    from broker.envelope import Envelope
    from broker.settings import SandboxKind
    from orchestrator.embedded import open_services
    from sandbox.select import select_runner

    base = settings or Settings()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="revise-acceptance-") as tmp:
        for index, (name, body, passes, limits, concurrency, latency) in enumerate(
                PIPELINE_CHECKS):
            run_settings = base.model_copy(update={
                "home": Path(tmp) / f"check{index}", "database_url": None,
                "sandbox": SandboxKind(kind)})
            try:
                services = open_services(run_settings, runner=select_runner(run_settings),
                                         latency=latency)
                envelope = Envelope(concurrency=concurrency, sandbox=SandboxLimits(
                    **{"timeout_seconds": 30.0, **limits}))
                try:
                    report = run_unchecked(services, f"acceptance-{index}", script(body), {},
                                           envelope)
                    ok = bool(passes(report, services))
                    detail = (report.get("error") or {}).get("message", "")[:70]
                finally:
                    services.close()
            except Exception as exc:
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:70]
            results.append((f"{kind} pipeline: {name}", ok, detail))
    return results
