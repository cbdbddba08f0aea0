"""Plain HTTP calls from tests to a broker's admin and lookup endpoints."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def http_call(
    method: str, url: str, body: object = None, *, token: str | None = None
) -> tuple[int, Any]:
    """One HTTP request (with a bearer `token` if given); (status, decoded JSON
    body or None). Errors are answers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw) if raw else None
