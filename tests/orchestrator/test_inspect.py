"""What `revise show` and `revise report` say a run cost follows the provider's answers
(issue 29, item 7): a refusal the provider's terms make free costs nothing, a failure it
may have charged for (a 5xx after the work) counts as paid, in the run report, the show
view, the page's matrix and its spend against a full rerun."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from broker.catalog import CATALOG
from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator import render
from orchestrator.embedded import open_services
from orchestrator.html_report import render_html
from orchestrator.inspect import describe_run, report_view
from sandbox.runner import ProcessRunner
from tests.fakes.openai_server import (
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    charge_then_error,
    ok_image,
    reject,
)

THREE_SHOTS = '''
async def orchestrate(ctx, args):
    out = []
    for prompt in ["a lighthouse", "a refused shot", "a charged shot"]:
        try:
            image = await ctx.run("image.generate", {"prompt": prompt})
            out.append(image["artifact"]["id"])
        except CapabilityError as e:
            out.append(e.charged)
    return out
'''
PRICE = CATALOG["image.generate"].unit_price


def test_a_free_refusal_costs_nothing_and_a_charged_failure_is_paid(tmp_path: Path) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, ok_image(), reject(400, "size is not supported"),
                     charge_then_error(500))
        settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS,
                            provider="http", provider_base_url=server.base_url,
                            provider_api_key=FAKE_API_KEY, provider_timeout_seconds=5)
        services = open_services(settings, runner=ProcessRunner())
        try:
            report = services.pipeline().run("money", THREE_SHOTS, {}, Envelope()).to_json()
            shown = describe_run(services.store, "money")
            view = report_view(services.store, "money")
        finally:
            services.close()
        charged = server.charged()
    assert report["status"] == "succeeded" and report["result"][1:] == ["no", "maybe"]
    assert charged == 2  # the provider's own ledger: the success and the 5xx after the work
    assert report["calls"]["executed"] == 3 and report["spend"] == round(2 * PRICE, 6)
    assert shown["spend"] == {"attempts": 3, "succeeded": 1, "cost": round(2 * PRICE, 6),
                              "replays": 0}
    assert shown["revisions"][0]["cost"] == round(2 * PRICE, 6)
    cells = [row["cells"][1] for row in view["matrix"]]
    assert [(c["outcome"], c["cost"]) for c in cells] == [
        ("executed", PRICE), ("failed", 0.0), ("failed", PRICE)]
    # Run from scratch, the three calls cost what they cost here: nothing was saved.
    assert view["rerun"] == {"cost": round(2 * PRICE, 6), "saved": 0.0}


ONE_SHOT = '''
async def orchestrate(ctx, args):
    return await ctx.run("image.generate", {"prompt": "a charged shot"})
'''


def test_an_open_attempt_has_one_number_everywhere_it_is_named(tmp_path: Path) -> None:
    """The error that stops the next submit, `revise show`, the report page and `revise
    attempts` (its # column) name an uncertain attempt by the same number; show and the
    page used to give its row id."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, ok_image(), charge_then_error(500))
        settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS,
                            provider="http", provider_base_url=server.base_url,
                            provider_api_key=FAKE_API_KEY, provider_timeout_seconds=5)
        services = open_services(settings, runner=ProcessRunner())
        try:
            services.pipeline().run("first", ONE_SHOT, {}, Envelope())  # row id 1
            charged = services.pipeline().run("money", ONE_SHOT.replace(
                "a charged", "another"), {}, Envelope()).to_json()
            stopped = services.pipeline().run("money", ONE_SHOT.replace(
                "a charged", "another"), {}, Envelope()).to_json()
            (attempt,) = services.store.list_attempts("money")
            console = Console(record=True, width=200)
            shown = describe_run(services.store, "money")
            render.show(console, shown)
            page = render_html(report_view(services.store, "money"))
        finally:
            services.close()
    assert (attempt.id, attempt.number) == (2, 0)
    assert "(attempt #0)" in stopped["error"]["message"]
    assert charged["calls"]["uncertain"] == 1 and charged["calls"]["failed"] == 0
    assert "  #0 orchestrate/#0@:0 uncertain" in console.export_text()
    assert "attempt #0 at" in page and "attempt #2" not in page
