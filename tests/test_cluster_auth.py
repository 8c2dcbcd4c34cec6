"""Connect tickets and VM tokens (clawlet.controlplane.auth): the control plane's side of the handshake."""

from __future__ import annotations

import base64
import json
import threading
import time

import jwt
import pytest

from clawlet.cluster.protocol import TICKET_TTL_SECONDS
from clawlet.controlplane.auth import (
    MIN_SECRET_BYTES,
    VM_TOKEN_AUDIENCE,
    VM_TOKEN_ISSUER,
    InMemoryTicketBackend,
    TicketRejected,
    TicketStore,
    TokenRejected,
    issue_vm_token,
    ticket_digest,
    verify_vm_token,
)

SECRET = "a-test-secret-that-is-long-enough-for-hs512-too-0123456789abcdefghij"
OTHER_SECRET = "another-secret-that-is-long-enough-987654321"


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- tickets -------------------------------------------------------------------------------------


def test_ticket_is_random_url_safe_and_long() -> None:
    store = TicketStore()
    tickets = {store.issue("u1") for _ in range(50)}
    assert len(tickets) == 50
    for ticket in tickets:
        assert len(base64.urlsafe_b64decode(ticket + "=" * (-len(ticket) % 4))) >= 16  # ≥ 128 bits
        assert set(ticket) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_ticket_redeems_once_then_is_refused_as_reused() -> None:
    store = TicketStore()
    ticket = store.issue("user-1", vm_id="vm-7")
    record = store.redeem_record(ticket, "user-1")
    assert (record.user_id, record.vm_id) == ("user-1", "vm-7")
    with pytest.raises(TicketRejected) as info:
        store.redeem(ticket)
    assert info.value.reason == "reused"
    assert "already used" in str(info.value)


def test_ticket_valid_until_just_before_30_seconds() -> None:
    clock = FakeClock()
    store = TicketStore(clock=clock)
    assert store.ttl == TICKET_TTL_SECONDS == 30
    early = store.issue("u")
    clock.now += 29.999
    assert store.redeem(early) == "u"


def test_ticket_expires_at_exactly_30_seconds() -> None:
    clock = FakeClock()
    store = TicketStore(clock=clock)
    ticket = store.issue("u")
    clock.now += 30.0
    with pytest.raises(TicketRejected) as info:
        store.redeem(ticket)
    assert info.value.reason == "expired"
    with pytest.raises(TicketRejected) as again:  # an expired ticket stays refused
        store.redeem(ticket)
    assert again.value.reason == "reused"


def test_unknown_and_malformed_tickets() -> None:
    store = TicketStore()
    with pytest.raises(TicketRejected) as unknown:
        store.redeem("A" * 43)
    assert unknown.value.reason == "unknown"
    for bad in ("", "short", "has spaces in it......", "x" * 300, "bad/char" * 4):
        with pytest.raises(TicketRejected) as malformed:
            store.redeem(bad)
        assert malformed.value.reason == "malformed"


def test_ticket_for_another_user_is_refused_and_used_up() -> None:
    store = TicketStore()
    ticket = store.issue("alice")
    with pytest.raises(TicketRejected) as info:
        store.redeem(ticket, "mallory")
    assert info.value.reason == "user_mismatch"
    with pytest.raises(TicketRejected) as again:
        store.redeem(ticket, "alice")
    assert again.value.reason == "reused"


def test_store_keeps_digests_not_tickets_and_purges_old_ones() -> None:
    clock = FakeClock()
    backend = InMemoryTicketBackend()
    store = TicketStore(backend, clock=clock)
    ticket = store.issue("u")
    assert ticket not in backend._records
    assert ticket_digest(ticket) in backend._records
    clock.now += 2 * TICKET_TTL_SECONDS + 1
    store.issue("u")  # issuing purges tickets expired more than one ttl ago
    assert len(backend) == 1
    with pytest.raises(TicketRejected) as info:
        store.redeem(ticket)
    assert info.value.reason == "unknown"


def test_concurrent_redeems_let_exactly_one_through() -> None:
    store = TicketStore()
    ticket = store.issue("u")
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def redeem() -> None:
        barrier.wait()
        try:
            outcomes.append(store.redeem(ticket))
        except TicketRejected as exc:
            outcomes.append(exc.reason)

    threads = [threading.Thread(target=redeem) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["reused"] * 7 + ["u"]


# -- VM tokens -----------------------------------------------------------------------------------


def test_vm_token_round_trip() -> None:
    token = issue_vm_token("user-1", SECRET, 3600, vm_id="vm-1")
    claims = verify_vm_token(token, SECRET, user_id="user-1")
    assert claims.user_id == "user-1"
    assert claims.vm_id == "vm-1"
    assert claims.expires_at - claims.issued_at == 3600
    assert claims.token_id
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload["aud"] == VM_TOKEN_AUDIENCE
    assert payload["iss"] == VM_TOKEN_ISSUER
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: issue_vm_token("u", SECRET, 60, audience="another-service"), "audience"),
        (lambda: issue_vm_token("u", SECRET, 60, issuer="someone-else"), "issuer"),
        (lambda: issue_vm_token("u", OTHER_SECRET, 60), "signature"),
        (lambda: issue_vm_token("u", SECRET, 60, now=time.time() - 120), "expired"),
        (lambda: issue_vm_token("u", SECRET, 60, now=time.time() + 600), "not_yet_valid"),
        (lambda: issue_vm_token("someone-else", SECRET, 60), "subject"),
    ],
    ids=["audience", "issuer", "secret", "expired", "future", "subject"],
)
def test_vm_token_refusals(make: object, reason: str) -> None:
    token = make()  # type: ignore[operator]
    with pytest.raises(TokenRejected) as info:
        verify_vm_token(token, SECRET, user_id="u")
    assert info.value.reason == reason
    assert token not in str(info.value)


def _unsigned(header: dict[str, object], payload: dict[str, object], signature: bytes = b"") -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join([part(json.dumps(header).encode()), part(json.dumps(payload).encode()), part(signature)])


def _claims(**overrides: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": "u",
        "aud": VM_TOKEN_AUDIENCE,
        "iss": VM_TOKEN_ISSUER,
        "iat": now,
        "exp": now + 60,
        "jti": "j1",
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def test_alg_none_is_refused() -> None:
    token = _unsigned({"alg": "none", "typ": "JWT"}, _claims())
    with pytest.raises(TokenRejected) as info:
        verify_vm_token(token, SECRET)
    assert info.value.reason == "algorithm"
    lower = _unsigned({"alg": "None", "typ": "JWT"}, _claims())
    with pytest.raises(TokenRejected):
        verify_vm_token(lower, SECRET)


def test_other_hmac_algorithms_are_refused() -> None:
    token = jwt.encode(_claims(), SECRET, algorithm="HS512")
    with pytest.raises(TokenRejected) as info:
        verify_vm_token(token, SECRET)
    assert info.value.reason == "algorithm"


@pytest.mark.parametrize("missing", ["sub", "aud", "iss", "iat", "exp", "jti"])
def test_every_claim_is_required(missing: str) -> None:
    token = jwt.encode(_claims(**{missing: None}), SECRET, algorithm="HS256")
    with pytest.raises(TokenRejected) as info:
        verify_vm_token(token, SECRET)
    assert info.value.reason in ("claims", "audience", "issuer")


def test_malformed_tokens_are_refused() -> None:
    for bad in ("", "not-a-jwt", "a.b.c", "x" * 10_000):
        with pytest.raises(TokenRejected) as info:
            verify_vm_token(bad, SECRET)
        assert info.value.reason in ("malformed", "claims")


def test_empty_subject_is_refused() -> None:
    token = jwt.encode(_claims(sub=""), SECRET, algorithm="HS256")
    with pytest.raises(TokenRejected):
        verify_vm_token(token, SECRET)


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match=str(MIN_SECRET_BYTES)):
        issue_vm_token("u", "short", 60)
    token = issue_vm_token("u", SECRET, 60)
    with pytest.raises(ValueError):
        verify_vm_token(token, "short")


def test_issue_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        issue_vm_token("", SECRET, 60)
    with pytest.raises(ValueError):
        issue_vm_token("u", SECRET, 0)
    with pytest.raises(ValueError):
        TicketStore().issue("")
