"""Per-job leases in Redis: at most one live copy of a job, a bounded number of starts.

Celery over Redis delivers at least once. A job that outlives the visibility
timeout is delivered again while the first copy still runs, and a job whose
worker dies comes back (``task_reject_on_worker_lost``), possibly forever.
``JobLease.begin(job_id)`` decides what a delivery does:

* ``DONE``       the job already finished; its stored answer is returned again.
* ``DUPLICATE``  a live holder is running it; this delivery is a no-op.
* ``RUN``        this delivery holds the lease (first start, or a takeover from a
                 dead holder) and runs the job; ``finish`` stores the answer.
* ``GIVE_UP``    the job was started ``max_deliveries`` times and never finished
                 (its worker keeps dying): the caller records a visible failure.

The holder token is ``broker.owner.current_owner()`` (host, process-table
domain, random boot id, pid, process start, thread): in the same process table
a dead holder is seen at once; from anywhere else (another host, another
namespace, even one with the same hostname) only the lease tells, and it
expires ``ttl`` seconds after its last renewal. A holder renews the lease
every ``ttl / 3`` from a background thread for as long as the job runs.

``run_leased`` is the one way a job task goes through these verdicts (the
dispatcher and the sandbox job use it). A capability task needs none: the run store
keeps its copies apart (taking a claimed attempt is atomic, ``broker.spend``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis

from broker.owner import current_owner, owner_alive
from broker.periodic import Periodic

log = logging.getLogger("revise.lease")

_RETAIN_SECONDS = 24 * 3600  # how long the answer and the start count are kept

# KEYS[1] lease; ARGV[1] expected holder, ARGV[2] new holder ('' = delete), ARGV[3] ttl ms
_SWAP = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
"""


class LeaseVerdict(StrEnum):
    RUN = "run"
    DUPLICATE = "duplicate"
    DONE = "done"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class Grant:
    verdict: LeaseVerdict
    job_id: str
    starts: int = 0  # how many times the job was started, this start included
    holder: str | None = None
    answer: Any = None


class JobLease:
    def __init__(self, client: redis.Redis, *, ttl: float, max_deliveries: int,
                 prefix: str = "revise:job:") -> None:
        self._redis = client
        self._ttl_ms = int(ttl * 1000)
        self.max_deliveries = max_deliveries
        self._prefix = prefix
        self._swap = client.register_script(_SWAP)

    def _key(self, job_id: str, part: str) -> str:
        return f"{self._prefix}{job_id}:{part}"

    # ---- deciding ------------------------------------------------------------------------

    def begin(self, job_id: str, *, wait: float = 0.0) -> Grant:
        """Decide this delivery; wait up to ``wait`` s for a holder whose liveness is unknown."""
        me = current_owner()
        deadline = time.monotonic() + wait
        while True:
            done = self.answer(job_id)
            if done is not None:
                return Grant(LeaseVerdict.DONE, job_id, answer=done[0])
            lease = self._key(job_id, "lease")
            if self._redis.set(lease, me, px=self._ttl_ms, nx=True):
                return self._start(job_id, me)
            holder = self._redis.get(lease)
            if holder is None:
                continue  # expired or released between the two calls
            holder = holder.decode()
            alive = owner_alive(holder)
            if alive is False and self._swap(keys=[lease], args=[holder, me, self._ttl_ms]):
                log.warning("job %s: holder %s is dead; taking the job over", job_id, holder)
                return self._start(job_id, me)
            if alive is True or time.monotonic() >= deadline:
                self._redis.incr(self._key(job_id, "duplicates"))
                self._redis.expire(self._key(job_id, "duplicates"), _RETAIN_SECONDS)
                return Grant(LeaseVerdict.DUPLICATE, job_id, holder=holder)
            time.sleep(min(0.5, self._ttl_ms / 4000))

    def _start(self, job_id: str, me: str) -> Grant:
        starts_key = self._key(job_id, "starts")
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(starts_key)
            pipe.expire(starts_key, _RETAIN_SECONDS)
            starts = int(pipe.execute()[0])
        verdict = LeaseVerdict.GIVE_UP if starts > self.max_deliveries else LeaseVerdict.RUN
        return Grant(verdict, job_id, starts=starts, holder=me)

    # ---- holding and finishing -----------------------------------------------------------

    def hold(self, grant: Grant) -> AbstractContextManager[object]:
        """Context manager that renews ``grant``'s lease while the job runs."""
        if grant.holder is None:
            return nullcontext()
        return Periodic(f"lease-{grant.job_id}", self._ttl_ms / 3000,
                        lambda: self._renewed(grant))

    def renew(self, grant: Grant) -> bool:
        lease = self._key(grant.job_id, "lease")
        return bool(self._swap(keys=[lease], args=[grant.holder, grant.holder, self._ttl_ms]))

    def _renewed(self, grant: Grant) -> bool | None:
        try:
            if not self.renew(grant):
                log.error("job %s: lease lost to another holder; the store's attempt claim "
                          "still keeps calls from being paid twice", grant.job_id)
                return False
        except redis.RedisError as exc:
            log.warning("job %s: lease renewal failed: %s", grant.job_id, exc)
        return None

    def finish(self, grant: Grant, answer: Any) -> None:
        """Store the job's answer (later deliveries get DONE) and release the lease."""
        done = self._key(grant.job_id, "done")
        self._redis.set(done, json.dumps(answer, default=str), ex=_RETAIN_SECONDS)
        self.release(grant)

    def release(self, grant: Grant, *, counted: bool = True) -> None:
        """Give the lease up; ``counted=False`` when this start does not count towards
        ``max_deliveries`` (it stopped because a service was away, not because its
        worker died)."""
        if grant.holder is None:
            return  # a grant that holds no lease (a finished job's)
        self._swap(keys=[self._key(grant.job_id, "lease")], args=[grant.holder, "", 0])
        if not counted:
            self._redis.decr(self._key(grant.job_id, "starts"))

    def answer(self, job_id: str) -> tuple[Any] | None:
        """``(answer,)`` once the job finished, else None."""
        raw = self._redis.get(self._key(job_id, "done"))
        return None if raw is None else (json.loads(raw),)

    def wait_answer(self, job_id: str, timeout: float) -> tuple[Any] | None:
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            found = self.answer(job_id)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def starts(self, job_id: str) -> int:
        return int(self._redis.get(self._key(job_id, "starts")) or 0)

    def duplicates(self, job_id: str) -> int:
        """Deliveries that found the job running elsewhere and did nothing."""
        return int(self._redis.get(self._key(job_id, "duplicates")) or 0)

    def holder(self, job_id: str) -> str | None:
        raw = self._redis.get(self._key(job_id, "lease"))
        return None if raw is None else raw.decode()


@dataclass(frozen=True)
class Released:
    """What a leased task's ``run`` returns when it gives the lease back with no answer to
    keep (the job turned out to be finished elsewhere): later deliveries decide again."""

    answer: Any


def run_leased(lease: JobLease, job_id: str, *, run: Callable[[Grant], Any],
               give_up: Callable[[Grant], Any] | None = None,
               duplicate: Callable[[Grant], Any] | None = None,
               done: Callable[[Grant], Any] | None = None, wait: float = 0.0,
               uncounted: tuple[type[BaseException], ...] = ()) -> Any:
    """One delivery of a leased task, the same way for every task: the stored answer of a
    finished job (or what ``done`` makes of it); ``duplicate`` while a live copy holds the
    lease; ``give_up`` once the job was started ``max_deliveries`` times; else ``run``
    under the renewed lease. The answer is stored (later deliveries get it) and the lease
    released.

    An exception releases the lease so a redelivery decides again; one of ``uncounted``
    (a service was away, the worker did not die) does not count as a start."""
    grant = lease.begin(job_id, wait=wait)
    if grant.verdict is LeaseVerdict.DONE:
        return grant.answer if done is None else done(grant)
    if grant.verdict is LeaseVerdict.DUPLICATE:
        assert duplicate is not None, "a leased job has a duplicate handler"
        return duplicate(grant)
    try:
        if grant.verdict is LeaseVerdict.GIVE_UP:
            assert give_up is not None, "a leased job has a give-up handler"
            answer = give_up(grant)
        else:
            with lease.hold(grant):
                answer = run(grant)
    except uncounted:
        lease.release(grant, counted=False)
        raise
    except BaseException:
        lease.release(grant)
        raise
    if isinstance(answer, Released):
        lease.release(grant)
        return answer.answer
    lease.finish(grant, answer)
    return answer
