"""The honest runtime never sends past the host's limits (``sandbox.language.LIMITS``): a
checked script that would gets an error it sees, naming the limit, and the host never
has to stop the run as a protocol violation. Run in both sandboxes."""

from __future__ import annotations

from typing import Any

from broker.envelope import Envelope, SandboxLimits
from orchestrator.checker import check
from sandbox.language import LIMITS

ENVELOPE = Envelope(sandbox=SandboxLimits(timeout_seconds=60))

MANY_VALUES = '''async def orchestrate(ctx, args):
    values = []
    for i in range(10000):
        for j in range(11):
            values.append(j)
    try:
        await ctx.run("text.generate", {"prompt": "p", "system": values})
    except ValueError as e:
        return {"payload": str(e)}
    return {"payload": "sent"}
'''

MANY_RESULT_VALUES = '''async def orchestrate(ctx, args):
    values = []
    for i in range(10000):
        for j in range(11):
            values.append(j)
    return values
'''

WIDE_WAVE = '''async def orchestrate(ctx, args):
    async def one(i, j):
        return await ctx.run("text.generate", {"prompt": f"{i} {j}"})

    async def row(i):
        return await ctx.parallel([one(i, j) for j in range(50)])

    return await ctx.parallel([row(i) for i in range(100)])
'''

HEAVY_WAVE = '''async def orchestrate(ctx, args):
    values = []
    for i in range(10):
        for j in range(6000):
            values.append(j)
    return await ctx.parallel([ctx.run("text.generate", {"prompt": f"{k}", "system": values})
                               for k in range(20)])
'''

LOUD_ERROR = '''async def orchestrate(ctx, args):
    text = "".join(["m" for i in range(9000)])
    raise CapabilityError(text, code={"a": [1, 2]}, status=10 ** 30)
'''

# Races whose every branch fails before any call: none is committed or replayed, so the
# host holds each one's branches for the rest of the revision (open_race_branches).
OPEN_RACES = '''async def orchestrate(ctx, args):
    async def boom(i):
        raise KeyError(i)

    failures = 0
    for i in range(25):
        try:
            await ctx.race([boom(j) for j in range(1000)])
        except KeyError:
            failures += 1
        except ValueError as e:
            return {"failures": failures, "error": str(e)}
    return {"failures": failures}
'''


def _deep_fanouts(levels: int) -> str:
    """``levels`` helpers, each awaiting the next inside a ctx.parallel."""
    lines = []
    for i in range(levels):
        inner = (f"ctx.parallel([h{i + 1}(ctx)])" if i + 1 < levels else
                 'ctx.run("text.generate", {"prompt": "deep"})')
        lines += [f"async def h{i}(ctx):", f"    return await {inner}", "", ""]
    lines += ["async def orchestrate(ctx, args):", "    try:",
              "        return await ctx.parallel([h0(ctx)])",
              "    except ValueError as e:", "        return str(e)", ""]
    return "\n".join(lines)


def _run(services: Any, run_id: str, text: str) -> dict[str, Any]:
    assert check(text).valid, check(text).violations
    return services.pipeline().run(run_id, text, {}, ENVELOPE).to_json()


def test_a_payload_or_result_of_too_many_values_is_the_script_s_error(embedded_services
                                                                       ) -> None:
    report = _run(embedded_services, "many", MANY_VALUES)
    assert report["status"] == "succeeded", report["error"]
    assert "holds more than 100000 values" in report["result"]["payload"]
    assert report["calls"]["executed"] == 0
    report = _run(embedded_services, "many-result", MANY_RESULT_VALUES)
    assert (report["status"], report["error"]["type"]) == ("failed", "ValueError")
    assert "holds more than 100000 values" in report["error"]["message"]


def test_a_wave_past_wave_frames_stops_the_script_not_the_protocol(embedded_services
                                                                   ) -> None:
    report = _run(embedded_services, "wide", WIDE_WAVE)
    assert report["error"]["type"] == "ScriptStopped", report["error"]
    assert "5000 calls the script started at once" in report["error"]["message"]
    assert "wave_frames" in report["error"]["message"]
    assert report["calls"]["executed"] == 0
    report = _run(embedded_services, "heavy", HEAVY_WAVE)
    assert report["error"]["type"] == "ScriptStopped", report["error"]
    assert "wave_values" in report["error"]["message"]
    assert report["calls"]["executed"] == 0


def test_error_fields_are_cut_to_the_limits_the_host_holds(embedded_services) -> None:
    report = _run(embedded_services, "loud", LOUD_ERROR)
    error = report["error"]
    # A CapabilityError the host never answered a call with is the script's own error.
    assert (report["status"], error["type"]) == ("failed", "ScriptError"), error
    assert error["message"] == ("the script raised an error named CapabilityError: "
                                + "m" * LIMITS["error_chars"])[:LIMITS["error_chars"]]


def test_fanouts_nested_past_path_length_are_the_script_s_error(embedded_services) -> None:
    report = _run(embedded_services, "deep", _deep_fanouts(LIMITS["path_length"] + 1))
    assert report["status"] == "succeeded", report["error"]
    assert "nested more than 64 deep" in report["result"]
    assert report["calls"]["executed"] == 0


def test_races_left_open_past_open_race_branches_are_the_script_s_error(embedded_services
                                                                        ) -> None:
    report = _run(embedded_services, "open-races", OPEN_RACES)
    assert report["status"] == "succeeded", report["error"]
    opened = LIMITS["open_race_branches"] // LIMITS["fanout_width"]
    assert report["result"]["failures"] == opened
    assert "open_race_branches" in report["result"]["error"]
