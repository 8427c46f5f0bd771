"""A result written back for a maybe-charged attempt (`revise reconcile --result`, or the
sweep's provider lookup) is the slot a normal commit of that attempt would have stored:
its call expression's fingerprint, chain and line are the attempt's own, whatever name
the call is stored under (a relocated site's frozen name, or a new site's ``~chain``
suffix). The next revision then replays it: no prefix conflict, no second charge.

Driven through the real embedded pipeline and an HTTP provider that charges and then
answers 500 (the client is not told the provider honours keys, so the attempt stays
uncertain; the sweep asks the provider's lookup by key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import update

from broker.artifacts import artifact_id
from broker.envelope import Envelope
from broker.errors import InputError
from broker.identity import Identity
from broker.models import attempts
from broker.records import AttemptRecord, AttemptStatus
from orchestrator.reconcile import reconcile_attempt, resolve_by_lookup
from orchestrator.reconcile_input import Imported
from tests.fakes.openai_server import (
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    charge_then_error,
    ok_image,
    reject,
)

from .conftest import Harness
from .repairs.corpus import _s


@pytest.fixture(params=["process", pytest.param("process+postgresql",
                                                marks=pytest.mark.postgres)])
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    return request.param


PNG = b"\x89PNG\r\n\x1a\n" + b"operator's copy of the provider's image"
KNOWN = {"artifact": {"id": artifact_id(PNG), "media_type": "image/png", "bytes": len(PNG)},
         "width": 1024, "height": 1024}

# a1 is paid; a2's size is refused (free): the run fails with one committed call.
V1 = _s('''
    async def orchestrate(ctx, args):
        out = []
        for p in ["a1", "a2"]:
            size = "999x999" if p == "a2" else "1024x1024"
            out.append(await ctx.run("image.generate", {"prompt": p, "size": size}))
        return [o["artifact"]["id"] for o in out]
''')
# F1: a new loop in front; the old loop is relocated to its frozen name
# orchestrate/for0/#0, the new one is stored as orchestrate/for0/#0~<chain>.
INSERTED_IN_FRONT = _s('''
    async def orchestrate(ctx, args):
        extra = []
        for q in ["intro card"]:
            extra.append(await ctx.run("image.generate", {"prompt": q}))
        out = []
        for p in ["a1", "a2 fixed"]:
            size = "1024x1024"
            out.append(await ctx.run("image.generate", {"prompt": p, "size": size}))
        return [o["artifact"]["id"] for o in out]
''')
# F2: the fixed call is the new loop in front, stored under a suffixed name.
FIXED_IN_FRONT = _s('''
    async def orchestrate(ctx, args):
        extra = []
        for q in ["a2 fixed"]:
            extra.append(await ctx.run("image.generate", {"prompt": q}))
        out = []
        for p in ["a1"]:
            size = "1024x1024"
            out.append(await ctx.run("image.generate", {"prompt": p, "size": size}))
        return [o["artifact"]["id"] for o in extra + out]
''')


def _harness(make_harness: Callable[..., Harness], server: FakeOpenAIServer) -> Harness:
    # The provider keeps requests by key and can be asked (the sweep's lookup); the
    # client is not told it deduplicates, so a charged 500 stays uncertain.
    return make_harness(provider="http", provider_base_url=server.base_url,
                        provider_api_key=FAKE_API_KEY, provider_timeout_seconds=5.0,
                        provider_lookup_path="/requests/{key}")


def _run(harness: Harness, script: str, run_id: str) -> dict[str, Any]:
    return harness.pipeline.run(run_id, script, {}, Envelope()).to_json()


def _uncertain(harness: Harness, run_id: str) -> AttemptRecord:
    (attempt,) = [a for a in harness.services.store.list_attempts(run_id)
                  if a.status is AttemptStatus.UNCERTAIN]
    return attempt


def _write_back(how: str, harness: Harness, run_id: str, attempt: AttemptRecord) -> None:
    services = harness.services
    if how == "operator":
        decided = _operator_writes_back(harness, run_id, attempt)
        assert decided["decision"] == "resolved", decided
    else:  # the sweep: the provider's lookup by key returns the result it kept
        (decided,) = resolve_by_lookup(services.store, services.provider, services.artifacts)
        assert (decided["run_id"], decided["identity"], decided["decision"]) == (
            run_id, str(attempt.identity), "resolved")


def _assert_committed_as_the_attempt(harness: Harness, run_id: str,
                                     attempt: AttemptRecord) -> None:
    """The written slot carries the attempt's own call facts (a normal commit's)."""
    assert attempt.fingerprint and attempt.line is not None
    slot = harness.services.store.get_slot(run_id, attempt.identity)
    assert slot is not None
    assert (slot.capability, slot.digest, slot.revision) == (
        attempt.capability, attempt.digest, attempt.revision)
    assert (slot.fingerprint, slot.chain_fingerprint, slot.line) == (
        attempt.fingerprint, attempt.chain_fingerprint, attempt.line)


@pytest.mark.parametrize("how", ["operator", "sweep"])
def test_a_write_back_at_a_relocated_site_keeps_the_call_it_was(make_harness, how) -> None:
    """F1: the uncertain call ran as the relocated loop's site, stored under its frozen
    name, whose own site in the revision is another call (the new loop's). The written
    slot is the relocated call's: the run goes on and replays it."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        assert _run(harness, V1, "r2")["status"] == "failed"
        assert server.charged() == 1
        server.queue(IMAGES, ok_image(), charge_then_error(500))
        second = _run(harness, INSERTED_IN_FRONT, "r2")
        assert second["status"] == "failed" and second["error"]["charged"] == "maybe", second
        assert server.charged() == 3
        attempt = _uncertain(harness, "r2")
        assert attempt.identity == Identity.parse("orchestrate/for0/#0@:1")

        _write_back(how, harness, "r2", attempt)
        _assert_committed_as_the_attempt(harness, "r2", attempt)
        store = harness.services.store
        a1 = store.get_slot("r2", Identity.parse("orchestrate/for0/#0@:0"))
        assert a1 is not None and a1.fingerprint == attempt.fingerprint

        asked = len(server.requests_to(IMAGES))
        again = _run(harness, INSERTED_IN_FRONT, "r2")
        assert again["status"] == "succeeded", again["error"]
        assert (again["calls"]["replayed"], again["calls"]["executed"]) == (3, 0)
        assert server.charged() == 3 and len(server.requests_to(IMAGES)) == asked
        if how == "operator":
            assert again["result"][1] == artifact_id(PNG)


@pytest.mark.parametrize("how", ["operator", "sweep"])
def test_a_write_back_under_a_suffixed_storage_name(make_harness, how) -> None:
    """F2: the uncertain call ran as a new site whose name was frozen for another call,
    so it is stored as ``site~chain``: a name no site of the revision has."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        assert _run(harness, V1, "r3")["status"] == "failed"
        server.queue(IMAGES, charge_then_error(500))
        second = _run(harness, FIXED_IN_FRONT, "r3")
        assert second["status"] == "failed" and second["error"]["charged"] == "maybe", second
        attempt = _uncertain(harness, "r3")
        assert attempt.identity.site.startswith("orchestrate/for0/#0~")
        assert attempt.identity.occurrence == 0
        assert server.charged() == 2

        _write_back(how, harness, "r3", attempt)
        _assert_committed_as_the_attempt(harness, "r3", attempt)

        asked = len(server.requests_to(IMAGES))
        again = _run(harness, FIXED_IN_FRONT, "r3")
        assert again["status"] == "succeeded", again["error"]
        assert (again["calls"]["replayed"], again["calls"]["executed"]) == (2, 0)
        assert server.charged() == 2 and len(server.requests_to(IMAGES)) == asked
        if how == "operator":
            assert again["result"][0] == artifact_id(PNG)


def _forget_call_facts(harness: Harness, attempt: AttemptRecord) -> None:
    """What an attempt claimed before migration 0007 looks like."""
    with harness.services.store.engine.begin() as conn:
        conn.execute(update(attempts).where(attempts.c.id == attempt.id).values(
            fingerprint=None, chain_fingerprint=None, line=None))


def _operator_writes_back(harness: Harness, run_id: str, attempt: AttemptRecord
                          ) -> dict[str, Any]:
    return reconcile_attempt(harness.services.store, run_id, str(attempt.identity),
                             result=KNOWN, operator="ana", reason="provider shows it",
                             artifacts=harness.services.artifacts,
                             imports=[Imported("shot.png", PNG)])


def test_an_attempt_without_call_facts_takes_them_from_its_sites_slots(make_harness) -> None:
    """An attempt claimed before the store kept its call facts (migration 0007) has none:
    the calls committed under its storage name share its call expression (the gate
    relocates only onto an equal one), so the written slot takes theirs."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        assert _run(harness, V1, "r4")["status"] == "failed"
        server.queue(IMAGES, ok_image(), charge_then_error(500))
        assert _run(harness, INSERTED_IN_FRONT, "r4")["status"] == "failed"
        attempt = _uncertain(harness, "r4")
        _forget_call_facts(harness, attempt)
        assert _operator_writes_back(harness, "r4", attempt)["decision"] == "resolved"
        store = harness.services.store
        a1 = store.get_slot("r4", Identity.parse("orchestrate/for0/#0@:0"))
        slot = store.get_slot("r4", attempt.identity)
        assert a1 is not None and slot is not None
        assert (slot.fingerprint, slot.chain_fingerprint) == (a1.fingerprint,
                                                              a1.chain_fingerprint)
        again = _run(harness, INSERTED_IN_FRONT, "r4")
        assert again["status"] == "succeeded", again["error"]
        assert again["calls"]["executed"] == 0 and server.charged() == 3


def test_an_attempt_without_call_facts_and_nothing_committed_there_is_refused(
        make_harness) -> None:
    """With no call facts and nothing committed under its storage name, the call
    expression is not guessed from a site name: the write-back is refused, nothing is
    stored and the attempt stays open."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        assert _run(harness, V1, "r5")["status"] == "failed"
        server.queue(IMAGES, charge_then_error(500))
        assert _run(harness, FIXED_IN_FRONT, "r5")["status"] == "failed"
        attempt = _uncertain(harness, "r5")
        _forget_call_facts(harness, attempt)
        with pytest.raises(InputError, match="claimed before the run store kept its call"):
            _operator_writes_back(harness, "r5", attempt)
        assert harness.services.store.get_slot("r5", attempt.identity) is None
        assert _uncertain(harness, "r5").id == attempt.id


# b1 is refused (free), b2 charged then 500: uncertain at @:1, nothing committed there.
TWO_TRIES = _s('''
    async def orchestrate(ctx, args):
        out = []
        for p in ["b1", "b2"]:
            try:
                out.append(await ctx.run("image.generate", {"prompt": p}))
            except CapabilityError as e:
                out.append(e.charged)
        return out
''')
# The call changed before anything was committed at its site, and only b1 asked: @:0 is
# committed changed, @:1 (the uncertain b2) is not reached.
ONE_TRY_SIZED = TWO_TRIES.replace('{"prompt": p}', '{"prompt": p, "size": "512x512"}'
                                  ).replace('["b1", "b2"]', '["b1"]')


@pytest.mark.parametrize("how", ["operator", "sweep"])
def test_a_write_back_for_a_call_the_run_has_since_changed_is_refused(make_harness,
                                                                      how) -> None:
    """Written back, the old call's result would disagree with the changed call committed
    under the same name, and every later submit would stop with PrefixConflict: the
    operator is told to abandon it, the lookup sweep abandons it (counted as paid)."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        server.queue(IMAGES, reject(400), charge_then_error(500))
        assert _run(harness, TWO_TRIES, "r6")["status"] == "succeeded"
        attempt = _uncertain(harness, "r6")
        assert attempt.identity == Identity.parse("orchestrate/for0/try0/#0@:1")
        assert _run(harness, ONE_TRY_SIZED, "r6")["status"] == "succeeded"
        store = harness.services.store
        assert store.get_slot("r6", Identity.parse("orchestrate/for0/try0/#0@:0"))
        if how == "operator":
            with pytest.raises(InputError, match="the run no longer makes its call"):
                _operator_writes_back(harness, "r6", attempt)
            assert _uncertain(harness, "r6").id == attempt.id
        else:  # the provider did the work, but its result is of no use: abandoned, paid
            (decided,) = resolve_by_lookup(store, harness.services.provider,
                                           harness.services.artifacts)
            assert (decided["attempt_id"], decided["decision"]) == (attempt.id, "abandoned")
        assert store.get_slot("r6", attempt.identity) is None


ONE_SHOT = _s('''
    async def orchestrate(ctx, args):
        shot = await ctx.run("image.generate", {"prompt": "storm"})
        return shot["artifact"]["id"]
''')
ONE_SHOT_TALLER = ONE_SHOT.replace('{"prompt": "storm"}',
                                   '{"prompt": "storm", "size": "1024x1536"}')


def test_an_uncertain_attempt_a_changed_request_went_past_can_still_be_settled(
        make_harness) -> None:
    """A repair that changes the payload at the identity of an uncertain attempt asks
    another request (not held up by the old one). The old attempt stays open: it can be
    abandoned (still counted as paid), not written back where another result is
    committed; before, neither worked and it was listed as open for ever."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        server.queue(IMAGES, charge_then_error(500))
        assert _run(harness, ONE_SHOT, "r7")["status"] == "failed"
        attempt = _uncertain(harness, "r7")
        assert _run(harness, ONE_SHOT_TALLER, "r7")["status"] == "succeeded"
        assert _uncertain(harness, "r7").id == attempt.id
        with pytest.raises(InputError, match="committed another request at its identity"):
            _operator_writes_back(harness, "r7", attempt)
        decided = reconcile_attempt(harness.services.store, "r7", str(attempt.identity),
                                    operator="ana", reason="the old size is not used")
        assert (decided["decision"], decided["attempt_id"]) == ("abandoned", attempt.id)
        store = harness.services.store
        assert [a.status for a in store.list_attempts("r7")] == [
            AttemptStatus.ABANDONED, AttemptStatus.SUCCEEDED]
        assert _run(harness, ONE_SHOT_TALLER, "r7")["calls"]["replayed"] == 1


def test_the_sweep_settles_the_attempt_it_asked_about(make_harness) -> None:
    """Two maybe-charged attempts at one identity, of two requests (a repair changed the
    payload). The sweep asks the provider about each by its own key: the later one's
    result is committed, the earlier one is abandoned (its work is not used; counted as
    paid). Before, the first lookup wrote the old picture under the new request."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server)
        server.queue(IMAGES, charge_then_error(500))
        assert _run(harness, ONE_SHOT, "r8")["status"] == "failed"
        server.queue(IMAGES, charge_then_error(500))
        assert _run(harness, ONE_SHOT_TALLER, "r8")["status"] == "failed"
        store = harness.services.store
        old, new = store.list_attempts("r8")
        decided = resolve_by_lookup(store, harness.services.provider,
                                    harness.services.artifacts)
        assert sorted((d["attempt_id"], d["decision"]) for d in decided) == [
            (old.id, "abandoned"), (new.id, "resolved")]
        slot = store.get_slot("r8", new.identity)
        assert slot is not None and slot.digest == new.digest
        again = _run(harness, ONE_SHOT_TALLER, "r8")
        assert again["status"] == "succeeded", again["error"]
        assert (again["calls"]["replayed"], again["calls"]["executed"]) == (1, 0)
        assert again["result"] == slot.result["artifact"]["id"] and server.charged() == 2
