"""What a provider's failure means for money, and what to do next (pure).

A provider that answered an error may still have done the work and charged for it:
a 5xx after the picture was rendered, a timeout after the request left, an answer
the adapter could not read. Such an attempt is *uncertain*: paid until proven
otherwise (``AttemptStatus.UNCERTAIN``). Which failures may be charged is the
provider's terms (``broker.catalog.PROVIDER_TERMS``, with the deployment's word on
idempotency keys from settings): a provider that honours ``Idempotency-Key`` is asked
again with the same key, and answers with the work it did instead of charging again.

    4xx (not 408/409/429), connect error,    -> free: the request was refused, never
    301/307/308 (the API moved)                 left, or was sent elsewhere
    429                                      -> free, rate limited: wait Retry-After
    429 insufficient_quota                   -> free, not asked again
    5xx, 408, 409, timeout, lost connection,
    unusable answer, any other 3xx           -> maybe charged (when the terms say a
                                                failure may be charged; else free)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from broker.errors import CapabilityError
from broker.records import AttemptRecord, AttemptStatus

# Failures whose request may have reached the provider and been carried out.
MAYBE_CHARGED_CODES = frozenset({"timeout", "connection_lost", "bad_response",
                                 "provider_error", "conflict"})
# A 429 that waiting does not cure (the account is out of quota): free, not asked again.
QUOTA_EXCEEDED = "quota_exceeded"
RATE_LIMIT_WAIT_CAP = 30.0  # seconds; a longer Retry-After is a failure the script sees


class Charge(StrEnum):
    FREE = "free"
    RATE_LIMITED = "rate_limited"
    MAYBE = "maybe"


@dataclass(frozen=True)
class ProviderTerms:
    """A provider's money behaviour: whether it deduplicates by ``Idempotency-Key`` and
    whether a failed request may still be charged."""

    honours_idempotency_key: bool = False
    charges_on_failure: bool = True

    def with_keys(self, honoured: bool) -> ProviderTerms:
        return ProviderTerms(honoured, self.charges_on_failure)


@dataclass(frozen=True)
class ChargeVerdict:
    charge: Charge
    wait_seconds: float = 0.0  # before asking again: the Retry-After it came with


def charge_of(error: CapabilityError, terms: ProviderTerms) -> ChargeVerdict:
    status, code = error.status, error.provider_code
    if code == QUOTA_EXCEEDED:
        return ChargeVerdict(Charge.FREE)
    if status == 429 or code == "rate_limited":
        return ChargeVerdict(Charge.RATE_LIMITED, retry_after(error.retry_after))
    maybe = (isinstance(status, int) and (status >= 500 or status in (408, 409))) \
        or code in MAYBE_CHARGED_CODES
    if not (maybe and terms.charges_on_failure):
        return ChargeVerdict(Charge.FREE)
    # A 503 may say when to come back; asked again under its key, it is asked then.
    asked = retry_after(error.retry_after) if error.retry_after is not None else 0.0
    return ChargeVerdict(Charge.MAYBE, asked)


def retry_after(value: object) -> float:
    """Seconds from the Retry-After the adapter passed on (whole seconds: a date is turned
    into them there, junk dropped); anything else: 1 s."""
    try:
        seconds = float(str(value))
    except (TypeError, ValueError):
        return 1.0
    if seconds != seconds or seconds < 0:  # NaN or negative
        return 1.0
    return seconds


def never_sent(attempt: AttemptRecord) -> bool:
    """Withdrawn or abandoned before its request left: no dispatch attempt at all."""
    return attempt.status is AttemptStatus.ABANDONED and attempt.sent_at is None


def counts_as_paid(attempt: AttemptRecord) -> bool:
    """Does the attempt's price count as spent? Every dispatch attempt does (paid until
    proven otherwise) but one the provider refused as free (``charged: no``)."""
    if never_sent(attempt):
        return False
    error = attempt.error or {}
    return not (attempt.status is AttemptStatus.FAILED and error.get("charged") == "no")
