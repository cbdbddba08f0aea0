"""The admin REST calls the CLI makes, and how failures become exit codes."""

from __future__ import annotations

import ssl
from typing import Any

import click
import httpx

# Exit codes scripts can rely on: 0 success, 1 the broker refused (its
# reason on stderr), 2 bad usage (click's), 3 the broker is unreachable.
REFUSED = 1
UNREACHABLE = 3


class Admin:
    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        *,
        headers: dict[str, str] | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """`headers`: the authentication's; `verify`: the TLS context of an
        https:// URL (trust store, client certificate, checks)."""
        self._client = httpx.Client(
            base_url=url.rstrip("/"), timeout=timeout, headers=headers, verify=verify
        )

    def request(
        self, method: str, path: str, body: object = None, params: dict[str, str] | None = None
    ) -> httpx.Response:
        """One request; the response when it succeeded, else the exit code."""
        try:
            response = self._client.request(
                method, path, json=body if body is not None else None, params=params
            )
        except httpx.HTTPError as exc:
            click.echo(f"error: cannot reach the broker: {exc}", err=True)
            raise SystemExit(UNREACHABLE) from exc
        if response.status_code >= 400:
            try:
                reason = response.json().get("reason", response.text)
            except ValueError:
                reason = response.text
            click.echo(f"error ({response.status_code}): {reason}", err=True)
            raise SystemExit(REFUSED)
        return response

    def call(
        self, method: str, path: str, body: object = None, params: dict[str, str] | None = None
    ) -> Any:
        """One request; the decoded JSON answer (None for 204)."""
        response = self.request(method, path, body, params)
        if response.status_code == 204 or not response.content:
            return None
        content_type = response.headers.get("content-type", "")
        if "json" in content_type:
            return response.json()
        return response.content
