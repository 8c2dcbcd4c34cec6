"""How the control plane authenticates execution planes: one-time connect tickets and VM tokens.

Two credentials reach a new execution plane (seed 001 §5, ``VM_TICKET`` and ``VM_TOKEN``):

* a **ticket** (:class:`TicketStore`): random, URL-safe, 256 bits, issued when the control plane
  schedules the VM, presented once in the first connect URL, valid :data:`TICKET_TTL_SECONDS` (30 s)
  and single use. Expired, unknown, reused, malformed and other-user tickets raise
  :class:`TicketRejected` with a ``reason``. Only a SHA-256 digest of each ticket is stored, so a
  leaked store does not leak usable tickets and a lookup compares digests, not the secret itself;
  the user check uses a constant-time comparison.
* a **VM token** (:func:`issue_vm_token` / :func:`verify_vm_token`): an HS256 JWT (PyJWT) with
  ``sub`` = user id, ``aud`` = :data:`VM_TOKEN_AUDIENCE`, ``iss`` = :data:`VM_TOKEN_ISSUER`, ``iat``,
  ``exp`` and a ``jti``. It travels only in the first ``auth`` frame, never in a URL. Verification
  pins the algorithm (``alg: none`` and every other algorithm are refused) and requires every claim;
  failures raise :class:`TokenRejected` with a ``reason``.

Tickets live behind :class:`TicketBackend` so a database can hold them (one row per ticket digest;
``claim`` is a single conditional ``UPDATE … WHERE redeemed_at IS NULL``); :class:`InMemoryTicketBackend`
is the in-process one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol

import jwt

from clawlet.cluster.protocol import TICKET_TTL_SECONDS

TICKET_BYTES: Final = 32
"""Random bytes per ticket (256 bits; the URL-safe text is 43 characters)."""
_TICKET_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]{16,256}")

VM_TOKEN_AUDIENCE: Final = "clawlet-exec-plane"  # noqa: S105 (not a secret)
VM_TOKEN_ISSUER: Final = "clawlet-control-plane"  # noqa: S105 (not a secret)
VM_TOKEN_ALGORITHM: Final = "HS256"  # noqa: S105 (not a secret)
MIN_SECRET_BYTES: Final = 32
"""RFC 7518 §3.2: an HS256 key must be at least as long as the hash output."""
MAX_TOKEN_CHARS: Final = 8192
REQUIRED_CLAIMS: Final = ("sub", "aud", "iss", "iat", "exp", "jti")

TicketRejectReason = Literal["unknown", "expired", "reused", "malformed", "user_mismatch"]
TokenRejectReason = Literal[
    "malformed",
    "algorithm",
    "signature",
    "expired",
    "not_yet_valid",
    "audience",
    "issuer",
    "claims",
    "subject",
]


class TicketRejected(Exception):
    """A ticket that cannot be redeemed; ``reason`` says why."""

    def __init__(self, reason: TicketRejectReason, message: str | None = None) -> None:
        self.reason: TicketRejectReason = reason
        super().__init__(message or _TICKET_MESSAGES[reason])


_TICKET_MESSAGES: dict[TicketRejectReason, str] = {
    "unknown": "unknown ticket",
    "expired": "ticket expired",
    "reused": "ticket already used",
    "malformed": "malformed ticket",
    "user_mismatch": "ticket was issued for another user",
}


class TokenRejected(Exception):
    """A VM token that does not verify; ``reason`` says why (the message never contains the token)."""

    def __init__(self, reason: TokenRejectReason, message: str) -> None:
        self.reason: TokenRejectReason = reason
        super().__init__(message)


# -- tickets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TicketRecord:
    """What is stored for one ticket (under its digest, never the ticket itself)."""

    user_id: str
    vm_id: str | None
    issued_at: float
    expires_at: float
    redeemed_at: float | None = None


@dataclass(frozen=True)
class Claim:
    """The outcome of :meth:`TicketBackend.claim`."""

    record: TicketRecord
    """The record as it was before the claim."""
    first: bool
    """This claim marked the ticket redeemed (``False``: it had been redeemed already)."""


class TicketBackend(Protocol):
    """Where tickets live. Implementations must make :meth:`claim` atomic."""

    def add(self, key: str, record: TicketRecord) -> None:
        """Store a new ticket under ``key`` (the ticket's digest)."""

    def claim(self, key: str, now: float) -> Claim | None:
        """Atomically mark the ticket redeemed at ``now`` if it was not yet; ``None`` if unknown."""

    def purge(self, before: float) -> int:
        """Forget tickets that expired before ``before``; return how many."""


class InMemoryTicketBackend:
    """Tickets in a dict, guarded by a lock (safe from several threads)."""

    def __init__(self) -> None:
        self._records: dict[str, TicketRecord] = {}
        self._lock = threading.Lock()

    def add(self, key: str, record: TicketRecord) -> None:
        with self._lock:
            self._records[key] = record

    def claim(self, key: str, now: float) -> Claim | None:
        with self._lock:
            record = self._records.get(key)
            if record is None:
                return None
            if record.redeemed_at is not None:
                return Claim(record, first=False)
            self._records[key] = replace(record, redeemed_at=now)
            return Claim(record, first=True)

    def purge(self, before: float) -> int:
        with self._lock:
            stale = [key for key, record in self._records.items() if record.expires_at < before]
            for key in stale:
                del self._records[key]
            return len(stale)

    def __len__(self) -> int:
        return len(self._records)


def ticket_digest(ticket: str) -> str:
    """The key a ticket is stored under."""
    return hashlib.sha256(ticket.encode("ascii")).hexdigest()


class TicketStore:
    """Issues and redeems single-use connect tickets (see the module docstring).

    A ticket is valid while ``clock() < issued_at + ttl``: at exactly ``ttl`` seconds it is expired.
    Redeemed and expired tickets are remembered for another ``ttl`` (so a reuse is reported as
    ``reused`` rather than ``unknown``), then purged whenever a ticket is issued.
    """

    def __init__(
        self,
        backend: TicketBackend | None = None,
        *,
        ttl: float = TICKET_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ticket ttl must be positive")
        self.backend: TicketBackend = backend if backend is not None else InMemoryTicketBackend()
        self.ttl = ttl
        self.clock = clock

    def issue(self, user_id: str, vm_id: str | None = None) -> str:
        """A new ticket for ``user_id`` (and optionally one VM)."""
        if not user_id:
            raise ValueError("a ticket needs a user_id")
        now = self.clock()
        self.backend.purge(now - self.ttl)
        ticket = secrets.token_urlsafe(TICKET_BYTES)
        self.backend.add(ticket_digest(ticket), TicketRecord(user_id, vm_id, now, now + self.ttl))
        return ticket

    def redeem(self, ticket: str, user_id: str | None = None) -> str:
        """Use ``ticket`` (once) and return its user id; with ``user_id``, it must be that user's.

        Raises :class:`TicketRejected`. A ticket presented for the wrong user is used up all the same.
        """
        return self.redeem_record(ticket, user_id).user_id

    def redeem_record(self, ticket: str, user_id: str | None = None) -> TicketRecord:
        """Like :meth:`redeem`, returning the whole record (user id, VM id, times)."""
        if not isinstance(ticket, str) or not _TICKET_SHAPE.fullmatch(ticket):
            raise TicketRejected("malformed")
        now = self.clock()
        claim = self.backend.claim(ticket_digest(ticket), now)
        if claim is None:
            raise TicketRejected("unknown")
        record = claim.record
        if not claim.first:
            raise TicketRejected("reused")
        if now >= record.expires_at:
            raise TicketRejected("expired", f"ticket expired {now - record.expires_at:.3f}s ago")
        if user_id is not None and not _same(user_id, record.user_id):
            raise TicketRejected("user_mismatch")
        return replace(record, redeemed_at=now)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


# -- VM tokens -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VmTokenClaims:
    """The verified claims of a VM token."""

    user_id: str
    issued_at: int
    expires_at: int
    token_id: str
    vm_id: str | None = None


def _key(secret: str | bytes) -> bytes:
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(f"the VM token secret must be at least {MIN_SECRET_BYTES} bytes")
    return key


def issue_vm_token(
    user_id: str,
    secret: str | bytes,
    ttl: float,
    *,
    vm_id: str | None = None,
    now: float | None = None,
    audience: str = VM_TOKEN_AUDIENCE,
    issuer: str = VM_TOKEN_ISSUER,
) -> str:
    """A signed VM token for ``user_id``, valid ``ttl`` seconds from ``now`` (default: the current time)."""
    if not user_id:
        raise ValueError("a VM token needs a user_id")
    if ttl <= 0:
        raise ValueError("the VM token ttl must be positive")
    issued = int(time.time() if now is None else now)
    payload: dict[str, Any] = {
        "sub": user_id,
        "aud": audience,
        "iss": issuer,
        "iat": issued,
        "exp": issued + int(ttl),
        "jti": secrets.token_hex(16),
    }
    if vm_id is not None:
        payload["vm"] = vm_id
    return jwt.encode(payload, _key(secret), algorithm=VM_TOKEN_ALGORITHM, headers={"typ": "JWT"})


def verify_vm_token(
    token: str,
    secret: str | bytes,
    *,
    user_id: str | None = None,
    audience: str = VM_TOKEN_AUDIENCE,
    issuer: str = VM_TOKEN_ISSUER,
    leeway: float = 0.0,
) -> VmTokenClaims:
    """Verify a VM token strictly and return its claims; with ``user_id``, ``sub`` must be that user.

    Raises :class:`TokenRejected`. Only HS256 is accepted; every claim of :data:`REQUIRED_CLAIMS` must
    be present; ``exp``/``iat`` are checked against the current time with ``leeway`` seconds.
    """
    key = _key(secret)
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise TokenRejected("malformed", "the VM token is missing or too long")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenRejected("malformed", f"the VM token is malformed: {exc}") from None
    if header.get("alg") != VM_TOKEN_ALGORITHM:
        raise TokenRejected(
            "algorithm", f"VM token algorithm {header.get('alg')!r} refused (only {VM_TOKEN_ALGORITHM})"
        )
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[VM_TOKEN_ALGORITHM],
            audience=audience,
            issuer=issuer,
            leeway=leeway,
            options={"require": list(REQUIRED_CLAIMS), "strict_aud": True},
        )
    except jwt.ExpiredSignatureError:
        raise TokenRejected("expired", "the VM token has expired") from None
    except jwt.ImmatureSignatureError:
        raise TokenRejected("not_yet_valid", "the VM token is not valid yet") from None
    except jwt.InvalidAudienceError:
        raise TokenRejected("audience", f"the VM token is not for {audience!r}") from None
    except jwt.InvalidIssuerError:
        raise TokenRejected("issuer", f"the VM token was not issued by {issuer!r}") from None
    except jwt.InvalidSignatureError:
        raise TokenRejected("signature", "the VM token's signature does not verify") from None
    except jwt.InvalidAlgorithmError:
        raise TokenRejected("algorithm", "the VM token's algorithm is refused") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected("claims", f"the VM token lacks the {exc.claim!r} claim") from None
    except jwt.PyJWTError as exc:
        raise TokenRejected("claims", f"the VM token is invalid: {exc}") from None
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise TokenRejected("claims", "the VM token's 'sub' must be a non-empty string")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti:
        raise TokenRejected("claims", "the VM token's 'jti' must be a non-empty string")
    if user_id is not None and not _same(user_id, sub):
        raise TokenRejected("subject", "the VM token belongs to another user")
    vm = claims.get("vm")
    return VmTokenClaims(
        user_id=sub,
        issued_at=int(claims["iat"]),
        expires_at=int(claims["exp"]),
        token_id=jti,
        vm_id=vm if isinstance(vm, str) else None,
    )
