"""The sandbox holds alone: classic escapes with the checker bypassed (test-only path),
in the Docker sandbox and in the bubblewrap process sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope, SandboxLimits
from broker.providers import ProviderLog

from .attacks.corpus import script
from .attacks.harness import run_unchecked


@pytest.fixture
def services(embedded_services):
    return embedded_services


def run(services, body: str, args: dict | None = None) -> dict:
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=30))
    return run_unchecked(services, "escape", script(body), args or {}, envelope)


def provider_identities(services) -> list[str]:
    return [entry["identity"] for entry in ProviderLog(services.settings.provider_log_path).read()]


def test_subclasses_walk_reaches_no_host_file(services, tmp_path: Path) -> None:
    marker = tmp_path / "host-secret.txt"
    marker.write_text("host only")
    report = run(services, '''
        walker = ().__class__.__base__.__subclasses__()
        wrap = [c for c in walker if c.__name__ == "_wrap_close"][0]
        system = wrap.__init__.__globals__["system"]
        code = system("cat " + args["marker"] + " > /tmp/copied 2>/dev/null")
        try:
            copied = open("/tmp/copied").read()
        except OSError:
            copied = ""
        return {"code": code, "copied": copied}
        ''', {"marker": str(marker)})
    assert report["result"] is not None, report["error"]
    assert "host only" not in report["result"]["copied"]
    assert provider_identities(services) == []


def test_format_string_and_frame_walk_leak_nothing_outside(services) -> None:
    report = run(services, '''
        leaked = "{0.__init__.__globals__}".format(CapabilityError)
        frame = imp("sys")._getframe()
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return {"env": dict(os.environ), "frames": names, "has_nonce": "nonce" in leaked}
        ''')
    result = report["result"]
    assert result is not None, report["error"]
    assert not any(key.startswith("REVISE_") or "KEY" in key for key in result["env"])


def test_forged_frames_through_the_runtime_channel_only_make_admitted_calls(services) -> None:
    report = run(services, '''
        if args.get("never"):
            await ctx.run("text.generate", {"prompt": "whitelisted"})
        sched = g["_SCHEDULER"]
        good = {"seq": 1, "kind": "call", "site": "orchestrate/if0/#0", "path": [],
                "occurrence": 0, "capability": "text.generate",
                "payload": {"prompt": "stolen channel"}, "take": 1}
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [good]})
        sched.channel.receive()
        forged = dict(good, seq=2, capability="image.generate", occurrence=1,
                      payload={"prompt": "not admitted"})
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [forged]})
        imp("time").sleep(5)
        return "not stopped"
        ''')
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "SandboxProtocolError"
    assert len(provider_identities(services)) == 1  # the one frame the host admitted


def test_socket_and_dns_reach_nothing(services) -> None:
    report = run(services, '''
        socket = imp("socket")
        out = {}
        for host, port in [("127.0.0.1", 5432), ("127.0.0.1", 6379), ("localhost", 2375)]:
            try:
                socket.create_connection((host, port), timeout=1).close()
                out[f"{host}:{port}"] = "connected"
            except OSError as exc:
                out[f"{host}:{port}"] = type(exc).__name__
        try:
            out["dns"] = socket.gethostbyname("pypi.org")
        except OSError as exc:
            out["dns"] = type(exc).__name__
        return out
        ''')
    assert report["result"] is not None, report["error"]
    assert "connected" not in report["result"].values()
    assert report["result"]["dns"] != "connected" and "." not in report["result"]["dns"]
