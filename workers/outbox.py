"""Dispatch messages a dispatcher may not have taken yet, kept so that none is lost.

Kombu's Redis transport takes a message off its queue with BRPOP and records it as
delivered (the ``unacked`` hash) only afterwards: a dispatcher killed between the two
loses the message, and until a dispatcher records the job nothing in the run store says
it was ever submitted. A client that waits sends it again (``JobHandle``); one that does
not (``revise submit`` without ``--wait``) left nobody to. So a client keeps each
dispatch message here as it queues it, for a day, and the reconciler's sweep
(``resend_lost_dispatches``) queues again one that no dispatcher took: no job recorded,
no answer, neither queued nor delivered. A dispatcher forgets the message once it has
answered its job; it takes a job id once (``workers.dispatcher``), so a copy sent twice
is answered once.

What is kept here is as hostile as the queue itself (anyone who can write to Redis can
write here): it is read within a size bound and checked as a dispatch message, and the
dispatcher checks a message sent from here as it checks any.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from redis.exceptions import ResponseError

from workers.messages import DispatchJob, InvalidMessage, check_task_id, parse_message
from workers.routing import DISPATCH_TASK, enqueue
from workers.transport import Transport

log = logging.getLogger("revise.outbox")

KEEP_SECONDS = 86_400
MAX_BYTES = 4 << 20  # a script (256 KiB), its args (1 MiB) and envelope, JSON-escaped
_BATCH = 500  # entries one sweep looks at


def _keys(prefix: str, job_id: str = "") -> tuple[str, str]:
    """(the index of kept jobs by the time they were sent, the key of one job's message)."""
    return f"{prefix}revise-outbox", f"{prefix}revise-outbox:{job_id}"


def keep(redis: Any, prefix: str, job_id: str, job: dict[str, Any]) -> None:
    """Keep the dispatch message ``job`` that was just queued as ``job_id``."""
    index, key = _keys(prefix, job_id)
    entry = json.dumps({"job": job, "resent": 0}, separators=(",", ":"))
    with redis.pipeline(transaction=True) as pipe:
        pipe.set(key, entry, ex=KEEP_SECONDS)
        pipe.zadd(index, {job_id: time.time()})
        pipe.execute()


def forget(redis: Any, prefix: str, job_id: str) -> None:
    index, key = _keys(prefix, job_id)
    with redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.zrem(index, job_id)
        pipe.execute()


def resend_lost_dispatches(ctx: Any, app: Any, *, now: float | None = None
                           ) -> dict[str, list[str]]:
    """One pass: queue again each kept dispatch message no dispatcher took within
    ``requeue_after_seconds`` (at most ``max_requeues`` times), forget the ones a
    dispatcher took. Returns the job ids resent and those given up on."""
    now = time.time() if now is None else now
    redis, prefix = ctx.broker_redis, app.routing.prefix
    index, _ = _keys(prefix)
    due = redis.zrangebyscore(index, "-inf", now - ctx.settings.requeue_after_seconds,
                              start=0, num=_BATCH)
    done: dict[str, list[str]] = {"resent": [], "given_up": []}
    held: set[str] | None = None
    queue = app.routing.queue("dispatch")
    for member in due:
        job_id = _job_id(member)
        entry = None if job_id is None else _entry(redis, prefix, job_id)
        if job_id is None or entry is None:
            with redis.pipeline(transaction=True) as pipe:  # hostile or gone: dropped
                pipe.zrem(index, member)
                if job_id is not None:
                    pipe.delete(_keys(prefix, job_id)[1])
                pipe.execute()
            continue
        if _taken(ctx, app, job_id):
            forget(redis, prefix, job_id)
            continue
        if held is None:
            held = Transport(redis).task_ids(queue)
        if job_id in held:
            continue  # queued behind other jobs, or a dispatcher holds it
        if entry["resent"] >= ctx.settings.max_requeues:
            forget(redis, prefix, job_id)
            log.error("job %s (run %s): its dispatch message was lost %s times; given up, "
                      "submit it again", job_id, entry["job"]["run_id"], entry["resent"])
            done["given_up"].append(job_id)
            continue
        enqueue(app, DISPATCH_TASK, queue, args=[entry["job"]], task_id=job_id)
        _, key = _keys(prefix, job_id)
        with redis.pipeline(transaction=True) as pipe:
            pipe.set(key, json.dumps({**entry, "resent": entry["resent"] + 1},
                                     separators=(",", ":")), ex=KEEP_SECONDS)
            pipe.zadd(index, {job_id: now})
            pipe.execute()
        log.warning("job %s (run %s): no dispatcher took its message (lost with a "
                    "dispatcher killed as it took it, or with Redis); queued again",
                    job_id, entry["job"]["run_id"])
        done["resent"].append(job_id)
    return done


def _job_id(member: bytes | str) -> str | None:
    """A member of the index as a job id, or None when it cannot be one (hostile)."""
    try:
        job_id = member.decode() if isinstance(member, bytes) else str(member)
        return check_task_id(job_id, "kept dispatch job")
    except (UnicodeDecodeError, InvalidMessage):
        log.warning("dropped a kept dispatch message under %r, which is no job id",
                    member[:80])
        return None


def _entry(redis: Any, prefix: str, job_id: str) -> dict[str, Any] | None:
    """The kept message of ``job_id``, or None when it is gone, too large or not a
    dispatch message of that job id (hostile: dropped)."""
    _, key = _keys(prefix, job_id)
    try:
        size = redis.strlen(key)  # a key of another type: ResponseError
        if not 0 < size <= MAX_BYTES:
            return None
        entry = json.loads(redis.get(key) or b"null")
        if not (isinstance(entry, dict) and isinstance(entry.get("resent"), int)):
            return None
        parse_message(DispatchJob, entry.get("job"), "kept dispatch job")
        return entry if entry["job"].get("job_id") == job_id else None
    except (InvalidMessage, ValueError, ResponseError):  # UnicodeDecodeError too
        log.warning("dropped a kept dispatch message for %r that is not one", job_id[:80])
        return None


def _taken(ctx: Any, app: Any, job_id: str) -> bool:
    """Did a dispatcher take the job: recorded it, or answered or started it?"""
    return ctx.store.get_job(job_id) is not None or \
        app.AsyncResult(job_id).state != "PENDING"
