"""Acceptance checks of the Docker sandbox against the real image.

    python -m sandbox.acceptance

Every check runs a script in a real container through the real host RPC and
broker. The scripts are hostile on purpose and are *not* checked: they reach
real builtins through frame walking (which the checker would refuse), so each
check shows that the container holds alone. Prints a pass/fail table; exit 0
only when every check passes.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.envelope import Envelope, SandboxLimits
from broker.png import PNG_SIGNATURE
from broker.settings import SandboxKind, Settings
from orchestrator.annotate import annotate
from orchestrator.checker import CheckReport
from orchestrator.embedded import Services, open_services
from orchestrator.gate import check_gate, frozen_sites
from orchestrator.pipeline import Admitted, Prepared, args_json, empty_report
from orchestrator.source import decode_source

SECRET = "sk-acceptance-secret-0000"

# Real builtins through the runtime's own globals: the checker refuses this (R06),
# so only a script that got past it would try; the container must hold anyway.
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


def run_unchecked(services: Services, run_id: str, text: str, args: Any,
                  envelope: Envelope) -> dict[str, Any]:
    """Annotate and gate but skip the checker: the test-only path to hostile scripts."""
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


@dataclass
class Check:
    name: str
    body: str
    passes: Callable[[dict[str, Any], Services], bool]
    limits: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 4
    latency: float = 0.0
    args: dict[str, Any] = field(default_factory=dict)


def _result(report: dict[str, Any]) -> Any:
    return report.get("result") or {}


def _error(report: dict[str, Any]) -> str:
    return (report.get("error") or {}).get("type", "")


def _stopped_by_rpc(report: dict[str, Any], services: Services) -> bool:
    return _error(report) == "RpcViolation" and not _provider_lines(services)


def _provider_lines(services: Services) -> list[str]:
    path = services.settings.provider_log_path
    return path.read_text().splitlines() if path.exists() else []


WHITELISTED = '''
        if args.get("never"):
            await ctx.run("text.generate", {"prompt": "whitelisted"})
        t = ctx._transport
        site = "orchestrate/if0/#0"'''

CHECKS: list[Check] = [
    Check("network isolation", '''
        socket = imp("socket")
        try:
            socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
            redis = "connected"
        except OSError as exc:
            redis = type(exc).__name__
        return {"ifaces": sorted(os.listdir("/sys/class/net")), "redis": redis}
        ''', lambda r, s: _result(r).get("ifaces") == ["lo"]
        and _result(r).get("redis") != "connected"),
    Check("read-only root", '''
        errors = []
        for path in ["/usr/evil", "/opt/revise/runtime.py", "/etc/passwd"]:
            try:
                open(path, "a").close()
                errors.append("written")
            except OSError as exc:
                errors.append(exc.errno)
        return errors
        ''', lambda r, s: r.get("result") is not None and "written" not in r["result"]),
    Check("non-root", 'return [os.getuid(), os.geteuid(), os.getgid()]',
          lambda r, s: r.get("result") is not None and 0 not in r["result"]),
    Check("seccomp denial", '''
        ctypes = imp("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        outcomes = {}
        for name, call in [("unshare", lambda: libc.unshare(0x10000000)),
                           ("ptrace", lambda: libc.ptrace(0, 0, 0, 0)),
                           ("mount", lambda: libc.mount(b"x", b"/tmp", b"tmpfs", 0, 0))]:
            outcomes[name] = [call(), ctypes.get_errno()]
        status = open("/proc/self/status").read()
        outcomes["mode"] = [line for line in status.splitlines() if line.startswith("Seccomp:")]
        return outcomes
        ''', lambda r, s: bool(r.get("result")) and all(
            v[0] == -1 and v[1] == 1 for k, v in r["result"].items() if k != "mode")
        and r["result"]["mode"] == ["Seccomp:\t2"]),
    Check("capabilities dropped", '''
        status = open("/proc/self/status").read().splitlines()
        return {l.split(":")[0]: l.split()[1] for l in status if l.startswith("Cap")}
        ''', lambda r, s: bool(r.get("result")) and all(
            v == "0000000000000000" for k, v in r["result"].items() if k != "CapAmb")),
    Check("no-new-privileges", '''
        status = open("/proc/self/status").read().splitlines()
        return [l for l in status if l.startswith("NoNewPrivs")]
        ''', lambda r, s: r.get("result") == ["NoNewPrivs:\t1"]),
    Check("memory limit kill", '''
        hog = []
        for i in range(400):
            hog.append(bytearray(8 * 1024 * 1024))
        return len(hog)
        ''', lambda r, s: r["status"] != "succeeded" and _error(r) == "SandboxError",
          limits={"memory_mb": 64}),
    Check("pids limit", '''
        time = imp("time")
        made = 0
        try:
            for i in range(500):
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
                made += 1
        except OSError as exc:
            return {"made": made, "error": exc.errno}
        return {"made": made}
        ''', lambda r, s: bool(r.get("result")) and r["result"].get("made", 999) < 32
        and "error" in r["result"], limits={"pids": 32}),
    Check("CPU/timeout kill", 'while True:\n    pass\n',
          lambda r, s: _error(r) == "SandboxTimeout", limits={"timeout_seconds": 3}),
    Check("output size cap", 'return "x" * 20000',
          lambda r, s: _error(r) == "OutputTooLarge", limits={"output_bytes": 4096}),
    Check("RPC nonce forgery rejected", WHITELISTED + '''
        frame = {"v": 1, "seq": 1, "nonce": "forged", "kind": "call", "site": site,
                 "path": [], "occurrence": 0, "capability": "text.generate",
                 "payload": {"prompt": "x"}}
        t._write("req-00000001.json", json.dumps(frame))
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc),
    Check("RPC unknown site rejected", '''
        run = ctx.run
        return await run("text.generate", {"prompt": "x"}, _site="forged/#0")
        ''', _stopped_by_rpc),
    Check("RPC occurrence replay rejected", WHITELISTED + '''
        frame = {"kind": "call", "site": site, "path": [], "occurrence": 0,
                 "capability": "text.generate", "payload": {"prompt": "x"}}
        await t.call(frame)
        await t.call(frame)
        return "replayed"
        ''', lambda r, s: _error(r) == "RpcViolation" and len(_provider_lines(s)) <= 1),
    Check("oversized frame rejected", WHITELISTED + '''
        t._write("req-00000001.json", json.dumps({"nonce": t.nonce, "pad": "x" * 2000000}))
        imp("time").sleep(5)
        return "not stopped"
        ''', _stopped_by_rpc),
    Check("concurrency limit held", WHITELISTED + '''
        for i in range(3):
            frame = {"v": 1, "seq": i + 1, "nonce": t.nonce, "kind": "call", "site": site,
                     "path": [i], "occurrence": 0, "capability": "text.generate",
                     "payload": {"prompt": f"x{i}"}}
            t._write(f"req-{i + 1:08d}.json", json.dumps(frame))
        imp("time").sleep(5)
        return "not stopped"
        ''', lambda r, s: _error(r) == "RpcViolation" and len(_provider_lines(s)) <= 2,
          concurrency=2, latency=1.0),
    Check("artifact export", '''
        image = await ctx.run("image.generate", {"prompt": "acceptance"})
        return image["artifact"]
        ''', lambda r, s: bool(r.get("result")) and s.artifacts.get(
            r["result"]["id"]).startswith(PNG_SIGNATURE)),
    Check("no credentials or host env", '''
        seen = dict(os.environ)
        seen["pid1"] = open("/proc/1/environ", "rb").read().decode("latin-1")
        return seen
        ''', lambda r, s: bool(r.get("result")) and SECRET not in str(r["result"])
        and not any(k.startswith("REVISE_") for k in r["result"])),
    Check("no host files or other runs' frames", '''
        found = {}
        for path in [args["runs_dir"], args["source_dir"], "/var/run/docker.sock"]:
            try:
                found[path] = sorted(os.listdir(path))[:5]
            except OSError as exc:
                found[path] = exc.errno
        found["pid1"] = open("/proc/1/cmdline", "rb").read().decode("latin-1")
        return found
        ''', lambda r, s: bool(r.get("result")) and "runtime.py" in r["result"].pop("pid1")
        and all(isinstance(v, int) for v in r["result"].values()),
        args={"source_dir": str(Path(__file__).resolve().parent.parent)}),
]


def _container_left(run_id: str) -> bool:
    import docker

    from sandbox.docker_runner import LABEL_RUN

    client = docker.from_env()
    return bool(client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}))


def run_checks(settings: Settings | None = None, *, only: str | None = None
               ) -> list[tuple[str, bool, str]]:
    from sandbox.docker_runner import DockerRunner

    base = settings or Settings()
    results: list[tuple[str, bool, str]] = []
    os.environ["REVISE_PROVIDER_API_KEY"] = SECRET  # must never reach a container
    with tempfile.TemporaryDirectory(prefix="revise-acceptance-") as tmp:
        for index, check in enumerate(CHECKS):
            if only and only not in check.name:
                continue
            home = Path(tmp) / f"check{index}"
            run_settings = base.model_copy(update={"home": home, "database_url": None,
                                                   "sandbox": SandboxKind.DOCKER})
            services = open_services(run_settings, runner=DockerRunner(run_settings),
                                     latency=check.latency)
            envelope = Envelope(concurrency=check.concurrency,
                                sandbox=SandboxLimits(**{"timeout_seconds": 30.0,
                                                         **check.limits}))
            run_id = f"acceptance-{index}"
            try:
                report = run_unchecked(services, run_id, script(check.body),
                                       {**check.args, "runs_dir": str(Path(tmp).resolve())},
                                       envelope)
                ok = bool(check.passes(report, services))
                detail = (report.get("error") or {}).get("message", "")[:70] or str(
                    report.get("result"))[:70]
            except Exception as exc:  # a check that crashes is a failed check
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:70]
            finally:
                services.close()
            results.append((check.name, ok, detail))
        if not only or "removed" in only:
            results.append(("container removed after kill",
                            not any(_container_left(f"acceptance-{i}")
                                    for i in range(len(CHECKS))), "no labelled container left"))
    return results


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    results = run_checks()
    table = Table("check", "result", "detail")
    for name, ok, detail in results:
        table.add_row(name, "[green]pass[/]" if ok else "[red]FAIL[/]", detail)
    Console().print(table)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
