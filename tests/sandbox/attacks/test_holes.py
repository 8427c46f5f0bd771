"""Holes the attack corpus found, one test each, named after the hole."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.checker import check

from .harness import run_unchecked

_ENTRY = "\n\nasync def orchestrate(ctx, args):\n    return len(A)\n"


def _chain(first: str, step: str, n: int) -> str:
    lines = [f"A0 = {first}"] + [f"A{i} = {step.format(p=f'A{i - 1}')}" for i in range(1, n)]
    return "\n".join(lines) + f"\nA = A{n - 1}" + _ENTRY


@pytest.mark.parametrize("source", [
    _chain("[1, 2]", "[{p}, {p}]", 60),  # 2**60 items as a tree, 60 objects
    _chain("(1, 2)", "({p}, {p}, {p})", 40),
    _chain("{'k': [1]}", "{{'a': {p}, 'b': {p}}}", 60),
    "A = [[[[[[0] * 50] * 50] * 50] * 50] * 50] * 50" + _ENTRY,  # one expression, 50**6
], ids=["list-doubling", "tuple-tripling", "dict-doubling", "nested-repeat"])
def test_hole_checker_walked_shared_constants_as_trees(source: str) -> None:
    """Hole: R11's mutable-depth walk (and any walk of a folded constant) visited a part
    shared by reference once per appearance, so ``A1 = [A0, A0]`` ... ``A59`` (valid,
    60 short lines) kept ``revise check`` and the dispatcher busy for hours. A constant
    is now sized as a tree when folded, memoised per object, and refused past the limit."""
    started = time.monotonic()
    report = check(source)
    assert time.monotonic() - started < 5
    assert not report.valid
    assert any(v.rule == "R00" and "huge literal" in v.message for v in report.violations)


def test_shared_constants_within_the_limit_stay_valid() -> None:
    report = check(_chain("[1, 2]", "[{p}, {p}]", 10))  # 2**11 items as a tree
    assert report.valid, report.violations


_SURROGATE_SCRIPTS = {
    "payload": 'await ctx.run("text.generate", {"prompt": "p" + chr(55296)})\nreturn 1\n',
    "result": "return {chr(56320): chr(55296)}\n",
    "log": 'ctx.log("x" + chr(56320))\nreturn 1\n',
    "error": 'raise ValueError("boom" + chr(55296))\n',
}


@pytest.mark.parametrize("where", sorted(_SURROGATE_SCRIPTS))
def test_hole_lone_surrogate_from_the_sandbox_crashed_the_host(where: str, tmp_path) -> None:
    """Hole: a script the checker accepts (``chr(55296)`` is an allowed builtin call) sent a
    lone surrogate, which json.loads on the host turned into a str the host could not
    encode: the session handler died with UnicodeEncodeError (in the payload digest, the
    store), ``revise run`` printed a traceback and the run stayed ``running``. The host now
    refuses such a message as a protocol error: the run ends ``stopped``."""
    from broker.envelope import Envelope, SandboxLimits
    from broker.records import RunStatus
    from broker.settings import SandboxKind, Settings
    from orchestrator.checker import check as check_script
    from orchestrator.embedded import open_services
    from sandbox.runner import ProcessRunner

    source = "async def orchestrate(ctx, args):\n    " + _SURROGATE_SCRIPTS[where].replace(
        "\n", "\n    ").rstrip() + "\n"
    assert check_script(source).valid
    services = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                             runner=ProcessRunner())
    try:
        report = services.pipeline().run("surrogate", source, {}, Envelope(
            sandbox=SandboxLimits(timeout_seconds=20))).to_json()
        assert report["status"] == "stopped", report
        assert report["error"]["type"] == "SandboxProtocolError"
        assert services.store.get_run("surrogate").status is RunStatus.STOPPED
        assert not services.settings.provider_log_path.exists()
    finally:
        services.close()


def test_channel_refuses_lone_surrogates_and_keeps_pairs() -> None:
    from broker.errors import SandboxProtocolError
    from sandbox.channel import decode_message

    ok = b'{"t": "result", "nonce": "n", "ok": true, "logs": ["\\ud83d\\ude00", "\\\\ud800"]}'
    assert decode_message(ok)["logs"] == ["\U0001f600", "\\ud800"]
    for data in (b'{"a": "\\ud800"}', b'{"\\uDC00": 1}', b'{"a": ["x\\udbff"]}'):
        with pytest.raises(SandboxProtocolError, match="lone surrogate"):
            decode_message(data)


def test_hole_one_message_of_many_values_cost_the_host_400_mb() -> None:
    """Hole: values were counted after parsing, so one message within the 8 MiB limit, of
    ``{},`` 2.8 million times, cost the host 400 MB and 4 s to parse before it was refused.
    It is refused from its bytes now; text holding commas and brackets is not counted."""
    import tracemalloc

    from broker.errors import SandboxProtocolError
    from sandbox.channel import decode_message, more_values_than
    from sandbox.language import LIMITS

    head = b'{"t": "batch", "nonce": "n", "frames": [{"payload": {"p": ['
    for item in (b"{},", b"[],", b"0,", b'"",'):
        count = ((8 << 20) - 100) // len(item)
        data = head + item * (count - 1) + item[:-1] + b"]}}]}"
        tracemalloc.start()
        with pytest.raises(SandboxProtocolError, match="wave_values"):
            decode_message(data)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 << 20, f"{item!r}: {peak >> 20} MiB to refuse it"
    text = json.dumps({"t": "result", "nonce": "n", "ok": True, "logs": [],
                       "result": '[{"a": 1}, "b\\", "\\"' * 100_000}).encode()
    assert len(text) > 2 * LIMITS["wave_values"]
    assert not more_values_than(text, 10)
    assert decode_message(text)["result"].startswith('[{"a": 1}')
    nine = b'["a\\\\", [], "\\"[,", {"k": [0, 1]}, "[,]"]'
    assert more_values_than(nine, 5) and not more_values_than(nine, 6)  # 6 seen outside


def test_hole_script_text_wrote_terminal_sequences_to_the_operator(tmp_path) -> None:
    """Hole: `revise run` (human output) printed a checked script's error message with its
    control characters, so ``raise ValueError(chr(27) + "]52;c;...")`` wrote the operator's
    clipboard (OSC 52) or reset the terminal (ESC c); a bypassed script's error *type* was
    printed as Rich markup. Script-controlled text is now shown, not sent."""
    import io

    from rich.console import Console

    from orchestrator import render
    from orchestrator.checker import check as check_script

    assert check_script('async def orchestrate(ctx, args):\n'
                        '    raise ValueError(chr(27) + "]52;c;cHduZWQ=" + chr(27) + "c")\n'
                        ).valid
    report = {"run_id": "r", "revision": 1, "status": "failed", "result": None,
              "calls": {"executed": 0, "succeeded": 0, "failed": 0, "replayed": 0,
                        "denied": 0},
              "gate": {"counterexamples": []}, "identities": [], "certificate": None,
              "error": {"type": "[link=http://evil]ValueError\x1b[2J",
                        "message": "\x1b]52;c;cHduZWQ=\x1b\\\x1bc\x9b31m line\nnext"}}
    out = io.StringIO()
    render.run_report(Console(file=out, color_system=None, width=300), report)
    text = out.getvalue()
    assert "\x1b" not in text and "\x9b" not in text
    assert "[link=http://evil]ValueError\\x1b[2J" in text
    assert "\\x1b]52;c;cHduZWQ=" in text and "line\nnext" in text


_RACE_BRANCH_SITE = '''async def orchestrate(ctx, args):
    g = CapabilityError.__init__.__globals__
    if args.get("never"):
        await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
    sched = g["_SCHEDULER"]
    body = g["dumps"]({"t": "batch", "nonce": sched.nonce, "frames": [
        {"seq": 1, "kind": "race_lookup", "site": "orchestrate/if0/#0", "path": [],
         "occurrence": 0, "branches": [{"site": ["unhashable"]}]}]}).encode()
    sched.channel._sock.sendall(len(body).to_bytes(4, "big") + body)
    g["time"].sleep(1)
    return "not stopped"
'''


def _process_services(tmp_path):
    from broker.settings import SandboxKind, Settings
    from orchestrator.embedded import open_services
    from sandbox.runner import ProcessRunner

    return open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                         runner=ProcessRunner())


def test_hole_race_branch_with_an_unhashable_site_crashed_the_host(tmp_path) -> None:
    """Hole: a race-lookup frame whose branch ``site`` was a list made the host's handler
    raise TypeError (``[...] in whitelist``): `revise run` died with a traceback and the
    run stayed ``running``. Branch sites are now type-checked (an unknown one is no
    branch), and any exception a handler did not foresee ends the run ``stopped`` (fail
    closed) instead of escaping."""
    from broker.envelope import Envelope, SandboxLimits
    from broker.records import RunStatus

    services = _process_services(tmp_path)
    try:
        report = run_unchecked(services, "race-branch", _RACE_BRANCH_SITE, {},
                               Envelope(sandbox=SandboxLimits(timeout_seconds=20)))
        # The unknown branch is described as None (no winner to look up); nothing crashes.
        assert report["status"] in ("succeeded", "stopped"), report
        assert services.store.get_run("race-branch").status is not RunStatus.RUNNING
    finally:
        services.close()


def test_any_unforeseen_handler_error_stops_the_run(tmp_path, monkeypatch) -> None:
    """The class of that hole: whatever a handler raises, the run ends stopped, the
    sandbox is cleaned up, and the host keeps serving the next run."""
    from broker.envelope import Envelope, SandboxLimits
    from broker.records import RunStatus
    from orchestrator.session import Session

    script = ('async def orchestrate(ctx, args):\n'
              '    return await ctx.run("text.generate", {"prompt": "x"})\n')
    services = _process_services(tmp_path)
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=20))
    try:
        with monkeypatch.context() as patch:
            patch.setattr(Session, "_wave", lambda self, frames, pool: {}["boom"])
            report = services.pipeline().run("unforeseen", script, {}, envelope).to_json()
        assert report["status"] == "stopped", report
        assert report["error"]["type"] == "SandboxProtocolError"
        assert "KeyError" in report["error"]["message"]
        assert services.store.get_run("unforeseen").status is RunStatus.STOPPED
        assert services.pipeline().run("next", script, {}, envelope).succeeded
    finally:
        services.close()


_ERROR_FIELD_TYPES = '''async def orchestrate(ctx, args):
    g = CapabilityError.__init__.__globals__
    sched = g["_SCHEDULER"]
    sched.channel.send({"t": "result", "nonce": sched.nonce, "ok": False, "logs": [],
                        "error": {"type": "ValueError", "message": "m", "identity": 7,
                                  "line": True, "capability": ["x"], "code": {"a": 1}}})
    g["time"].sleep(5)
    return "not stopped"
'''


def test_hole_error_fields_of_the_wrong_type_crashed_the_report(tmp_path) -> None:
    """Hole: a failed result whose error ``identity`` was a number passed the session (any
    str or int was kept) and then failed the run report's validation (pydantic
    ValidationError) after the sandbox had finished: a traceback, and the run stayed
    ``running``. Each error field is now held to its type and limit when the message
    arrives (``sandbox.inbound``): the run stops there, and ends."""
    from broker.envelope import Envelope, SandboxLimits
    from broker.records import RunStatus

    services = _process_services(tmp_path)
    try:
        report = run_unchecked(services, "error-types", _ERROR_FIELD_TYPES, {},
                               Envelope(sandbox=SandboxLimits(timeout_seconds=20)))
        assert report["status"] == "stopped", report
        assert report["error"]["type"] == "SandboxProtocolError"
        assert "result.error.line" in report["error"]["message"]
        assert services.store.get_run("error-types").status is RunStatus.STOPPED
    finally:
        services.close()
