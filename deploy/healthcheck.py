#!/usr/bin/env python3
"""The container health check: ``clawlet-healthcheck [URL]`` exits 0 when ``GET URL`` answers 2xx
within the timeout, 1 otherwise (saying why on stderr). Standard library only; the image installs it
as ``/usr/local/bin/clawlet-healthcheck`` (Dockerfile ``HEALTHCHECK``, deploy/compose.yaml)."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8002/health/live"
TIMEOUT_SECONDS = 8.0


def check(url: str) -> str | None:
    """Why ``url`` is not healthy, or ``None`` when it answered 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (http only)
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return f"{url}: {exc}"
    return None if 200 <= status < 300 else f"{url}: HTTP {status}"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else DEFAULT_URL
    problem = check(url)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
