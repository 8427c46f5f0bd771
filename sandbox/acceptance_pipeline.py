"""End-to-end acceptance checks of the host RPC, through the pipeline.

Hostile scripts run with the checker bypassed (``run_unchecked``, the
test-only path): they reach real builtins through frame walking and forge
frames, and the host must stop them before any provider call. These checks are
written against the file-RPC runtime (``ctx._transport``, ``req-N.json``) and
wait for their port to the socket runtime (``sandbox/runtime.py``,
``orchestrator/session.py``); ``python -m sandbox.acceptance --pipeline`` runs
them.
"""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.envelope import SandboxLimits
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
    from orchestrator.annotate import annotate
    from orchestrator.checker import CheckReport
    from orchestrator.gate import check_gate, frozen_sites
    from orchestrator.pipeline import Admitted, Prepared, args_json, empty_report
    from orchestrator.source import decode_source

    store = services.store
    source = decode_source(text)
    annotated = annotate(source.text)
    prefix = store.list_slots(run_id)
    gate = check_gate(frozen_sites(prefix), annotated.sites)
    store.ensure_run(run_id)
    revision = store.add_revision(run_id, source.text, source.digest)
    report = empty_report(run_id) | {"revision": revision, "gate": gate.to_json()}
    unchecked = CheckReport(valid=False, violations=(), facts={"unchecked": True})
    prepared = Prepared(source, annotated, gate, unchecked, prefix)
    admitted = Admitted(run_id, revision, source, args_json(args, envelope), prepared, report)
    return services.pipeline().execute(admitted, envelope)


def _error(report: dict[str, Any]) -> str:
    return (report.get("error") or {}).get("type", "")


def _provider_lines(services: Any) -> list[str]:
    path = services.settings.provider_log_path
    return path.read_text().splitlines() if path.exists() else []


def _stopped_by_rpc(report: dict[str, Any], services: Any) -> bool:
    return _error(report) == "RpcViolation" and not _provider_lines(services)


WHITELISTED = '''
        if args.get("never"):
            await ctx.run("text.generate", {"prompt": "whitelisted"})
        t = ctx._transport
        site = "orchestrate/if0/#0"'''

# (name, body, passes(report, services), limits, concurrency, latency)
PIPELINE_CHECKS: list[tuple[str, str, Callable[[dict[str, Any], Any], bool],
                            dict[str, Any], int, float]] = [
    ("output size cap", 'return "x" * 20000',
     lambda r, s: _error(r) == "OutputTooLarge", {"output_bytes": 4096}, 4, 0.0),
    ("RPC nonce forgery rejected", WHITELISTED + '''
        frame = {"v": 1, "seq": 1, "nonce": "forged", "kind": "call", "site": site,
                 "path": [], "occurrence": 0, "capability": "text.generate",
                 "payload": {"prompt": "x"}}
        t._write("req-00000001.json", json.dumps(frame))
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("RPC unknown site rejected", '''
        run = ctx.run
        return await run("text.generate", {"prompt": "x"}, _site="forged/#0")
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("RPC occurrence replay rejected", WHITELISTED + '''
        frame = {"kind": "call", "site": site, "path": [], "occurrence": 0,
                 "capability": "text.generate", "payload": {"prompt": "x"}}
        await t.call(frame)
        await t.call(frame)
        return "replayed"
        ''', lambda r, s: _error(r) == "RpcViolation" and len(_provider_lines(s)) <= 1,
     {}, 4, 0.0),
    ("oversized frame rejected", WHITELISTED + '''
        t._write("req-00000001.json", json.dumps({"nonce": t.nonce, "pad": "x" * 2000000}))
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc, {}, 4, 0.0),
    ("concurrency limit held", WHITELISTED + '''
        for i in range(3):
            frame = {"v": 1, "seq": i + 1, "nonce": t.nonce, "kind": "call", "site": site,
                     "path": [i], "occurrence": 0, "capability": "text.generate",
                     "payload": {"prompt": f"x{i}"}}
            t._write(f"req-{i + 1:08d}.json", json.dumps(frame))
        imp("time").sleep(5)
        return "not stopped"
        ''', lambda r, s: _error(r) == "RpcViolation" and len(_provider_lines(s)) <= 2,
     {}, 2, 1.0),
    ("artifact export", '''
        image = await ctx.run("image.generate", {"prompt": "acceptance"})
        return image["artifact"]
        ''', lambda r, s: bool(r.get("result")) and s.artifacts.get(
            r["result"]["id"]).startswith(b"\\x89PNG"), {}, 4, 0.0),
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
