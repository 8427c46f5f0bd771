"""One language table: every builtin name the checker lets a script use exists in both
sandboxes (a name the checker admits and the sandbox lacks fails a checked run)."""

from __future__ import annotations

from broker.envelope import Envelope
from orchestrator.checker import check
from sandbox import language


def every_builtin_script() -> str:
    names = sorted(language.BUILTIN_NAMES)
    lines = ["async def orchestrate(ctx, args):", "    seen = []"]
    for name in names:
        lines += [f"    value = {name}", f"    seen.append({name!r})"]
    lines.append("    return seen")
    return "\n".join(lines) + "\n"


def test_the_sandbox_gives_a_script_exactly_the_language_builtins(embedded_services) -> None:
    text = every_builtin_script()
    assert check(text).valid, check(text).violations
    report = embedded_services.pipeline().run("names", text, {}, Envelope()).to_json()
    assert report["status"] == "succeeded", report["error"]
    assert report["result"] == sorted(language.BUILTIN_NAMES)
