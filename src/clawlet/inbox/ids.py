"""ULIDs: 26-character, time-ordered ids (48-bit millisecond time + 80 random bits, Crockford base32).

Ids made in the same millisecond by one process are monotonic (the random part is incremented),
so sorting by id is sorting by creation order, which keeps message order stable when timestamps tie.
"""

from __future__ import annotations

import secrets
import threading
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1

_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_ulid(now_ms: int | None = None) -> str:
    """A new ULID; monotonic within this process even when the clock stands still or steps back."""
    global _last_ms, _last_random
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            random_part = _last_random + 1
            if random_part > _RANDOM_MAX:  # 2^80 ids in one millisecond: move to the next one
                ms += 1
                random_part = secrets.randbits(_RANDOM_BITS - 1)
        else:
            random_part = secrets.randbits(_RANDOM_BITS - 1)  # leaves room to increment
        _last_ms, _last_random = ms, random_part
    return _encode(ms, 10) + _encode(random_part, 16)


def ulid_time_ms(ulid: str) -> int:
    """The millisecond timestamp encoded in a ULID."""
    value = 0
    for char in ulid[:10].upper():
        value = value * 32 + CROCKFORD.index(char)
    return value
