"""Who is calling: the principal that `resolvent.State` binds values to on MCP."""

from __future__ import annotations

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components

__all__ = ("authenticated_principal",)


def authenticated_principal() -> str | None:
    """The SDK's authenticated caller: its token's subject (with the issuer, when the
    verifier names one), else its client id; None for an anonymous request."""
    token = get_access_token()
    if token is None:
        return None
    client_id, issuer, subject = principal_components(token)
    if subject:
        return f"subject:{issuer or ''}:{subject}"
    return f"client:{client_id}"
