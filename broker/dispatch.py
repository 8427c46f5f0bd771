"""The broker in one process: claim the new calls of a wave, then execute them.

Embedded runs (and anything else that spends in the process that asks) decide a
wave's new calls in the claim transaction (``broker.claim``) and execute what it
claimed (``broker.spend``) right here. A deployment splits the two: the sandbox
worker that asks claims, a broker worker executes (``workers.remote``,
``workers.capability``). Either way a redelivered or concurrent duplicate finds the
committed slot, its revision's failed attempt or the open attempt in the claim
transaction, never a second provider call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from broker.calls import CallReport, CallRequest, ClaimedCall, ClaimedWave, stop_report
from broker.claim import Claimer
from broker.envelope import Envelope
from broker.errors import AttemptInFlight, StoreUnavailable
from broker.heartbeats import AttemptHeartbeats
from broker.owner import current_owner
from broker.provider_gate import ProviderGate
from broker.providers import Provider
from broker.settings import Settings
from broker.spend import Spender
from broker.spool import CommitSpool
from broker.store import RunStore


class Broker:
    def __init__(self, *, store: RunStore, provider: Provider, envelope: Envelope,
                 settings: Settings, owner: str | None = None,
                 spool: CommitSpool | None = None,
                 heartbeats: AttemptHeartbeats | None = None,
                 gate: ProviderGate | None = None) -> None:
        self.store = store
        self.claimer = Claimer(store=store, envelope=envelope, settings=settings,
                               owner=owner or current_owner())
        self._asked: tuple[str, int] | None = None  # the run and revision it claims for
        self.spender = Spender(store=store, provider=provider, settings=settings,
                               call_timeout_seconds=envelope.call_timeout_seconds,
                               concurrency=envelope.concurrency, heartbeats=heartbeats,
                               spool=spool, gate=gate)

    def close(self) -> None:
        self.spender.close()

    def stop(self, why: str, *, withdraw: bool) -> None:
        """The revision stopped: with ``withdraw``, what was claimed and is still waiting
        for its provider turn is taken back (nothing of it was sent)."""
        if not withdraw or self._asked is None:
            return
        try:
            self.store.withdraw_unsent(*self._asked, self.claimer.owner,
                                       f"withdrawn before its request left: {why}")
        except StoreUnavailable:  # its owner is alive: the attempt is taken or waits
            pass

    def execute(self, request: CallRequest) -> CallReport:
        """Spend on one call the host decided is new (a wave of one)."""
        wave = self.claim_wave([request])
        return wave.answered[0] if wave.answered else next(iter(self.run_wave(wave)))

    def claim_wave(self, requests: Sequence[CallRequest]) -> ClaimedWave:
        """Decide the new calls of one wave (all of one run and revision) in one claim
        transaction, whole or not at all: a stop at any of its calls is the one answer
        and nothing of the wave reaches the provider. Replays and this revision's failed
        calls are answered at once."""
        self._asked = (requests[0].run_id, requests[0].revision)
        return self.claimer.claim_wave(requests)

    def run_wave(self, wave: ClaimedWave) -> Iterator[CallReport]:
        """Spend on the claimed calls: each report as its provider answers and its commit
        lands; never raises a safety stop, reports it."""
        for call, report in self.spender.execute([call for _, call in wave.claimed]):
            yield report if report is not None else _taken_back(call)

    def drain_spool(self) -> int:
        return self.spender.drain_spool()


def _taken_back(call: ClaimedCall) -> CallReport:
    """A claimed call this process could not send: taken back as never sent (its owner
    was judged gone) or its revision stopped meanwhile."""
    where = str(call.attempt.identity)
    stop = AttemptInFlight(f"the attempt at {where} was taken back before its request left "
                           "(its revision stopped, or its owner was judged gone); nothing "
                           "was sent. Submit the run again: the call runs once",
                           identity=where, attempt_id=call.attempt.id)
    return stop_report(call.attempt.identity, call.attempt.capability, stop)
