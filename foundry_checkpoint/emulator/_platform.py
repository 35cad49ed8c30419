"""What the platform gives a hosted agent's container, pointed at the emulator.

A Foundry-hosted agent runs with a managed identity and a few environment variables the platform
sets (``FOUNDRY_HOSTING_ENVIRONMENT``, ``FOUNDRY_PROJECT_ENDPOINT``,
``FOUNDRY_AGENT_SESSION_ID``). Code that passes no credential, the documented default, gets a
``DefaultAzureCredential``, and so do the hosts' own state-store clients (agent-framework-
foundry-hosting opens ``FoundryStateStore`` itself, with no way to pass a credential). To run
such an agent unchanged against the emulator, the emulator also serves a managed-identity token
endpoint in the App Service protocol (``IDENTITY_ENDPOINT`` + ``IDENTITY_HEADER``, api-version
2019-08-01), and :func:`agent_environment` lists the variables that wire a process to it.

The token it hands out names :data:`AGENT_IDENTITY`: a request that carries no call id is the
container acting for itself; one that carries a bound call id is resolved to that call's user
(see ``_identity.py``).
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from typing import Final

from aiohttp import web

from foundry_checkpoint._store._limits import HOSTING_ENV, PROJECT_ENDPOINT_ENV

from ._credential import token_for_user

__all__ = ["AGENT_IDENTITY", "IDENTITY_PATH", "ManagedIdentityEndpoint", "agent_environment"]

#: Path of the managed-identity token endpoint on the emulator's server.
IDENTITY_PATH: Final = "/msi/token"
#: The user the managed identity's tokens resolve to (the container itself).
AGENT_IDENTITY: Final = "hosted-agent"
_TOKEN_LIFETIME_SECONDS: Final = 3600

#: Turn off what the agentserver hosts' telemetry setup reaches out for even without a
#: connection string: usage statistics ("statsbeat"/SDKStats) and the Azure Monitor control
#: plane, which polls https://settings.sdk.monitor.azure.com for remote configuration.
_TELEMETRY_OFF: Final = {
    "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    "MICROSOFT_OTEL_SDKSTATS_DISABLED": "true",
    "APPLICATIONINSIGHTS_CONTROLPLANE_DISABLED": "true",
}


class ManagedIdentityEndpoint:
    """An App Service managed-identity token endpoint whose tokens the emulator accepts.

    ``GET /msi/token?api-version=2019-08-01&resource=...`` with the ``X-IDENTITY-HEADER`` secret
    answers ``{"access_token", "expires_on", "resource", "token_type"}``, as azure-identity's
    ``ManagedIdentityCredential`` expects when ``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` are
    set. A request without the secret gets 401.

    Example:
        >>> endpoint = ManagedIdentityEndpoint()
        >>> len(endpoint.secret) > 16
        True
    """

    def __init__(self) -> None:
        self.secret = secrets.token_hex(16)

    async def handle(self, request: web.Request) -> web.Response:
        """Serve one token request.

        Args:
            request: A ``GET`` with the ``X-IDENTITY-HEADER`` secret and a ``resource``.

        Returns:
            The token as JSON, 401 without the secret, or 400 without a resource.
        """
        presented = request.headers.get("X-IDENTITY-HEADER", "")
        if not hmac.compare_digest(presented.encode(), self.secret.encode()):
            return web.json_response(
                {"error": "unauthorized", "error_description": "X-IDENTITY-HEADER is missing."},
                status=401,
            )
        resource = request.query.get("resource", "")
        if not resource:
            return web.json_response(
                {"error": "invalid_request", "error_description": "resource is required."},
                status=400,
            )
        body = {
            "access_token": token_for_user(AGENT_IDENTITY),
            "expires_on": str(int(time.time()) + _TOKEN_LIFETIME_SECONDS),
            "resource": resource,
            "token_type": "Bearer",
        }
        return web.Response(text=json.dumps(body), content_type="application/json")


def agent_environment(
    *, endpoint: str, identity_endpoint: str, identity_secret: str, ca_file: str, session_id: str
) -> dict[str, str]:
    """Compose the environment of a hosted agent's process that talks to the emulator.

    Args:
        endpoint: The project endpoint (``FOUNDRY_PROJECT_ENDPOINT``).
        identity_endpoint: The managed-identity token URL (``IDENTITY_ENDPOINT``).
        identity_secret: The secret the token endpoint requires (``IDENTITY_HEADER``).
        ca_file: The CA certificate the process must trust (``SSL_CERT_FILE``).
        session_id: The platform session id (``FOUNDRY_AGENT_SESSION_ID``).

    Returns:
        The variables, by name, with the hosts' usage telemetry turned off.

    Example:
        >>> env = agent_environment(
        ...     endpoint="https://127.0.0.1:8443/api/projects/emulator",
        ...     identity_endpoint="https://127.0.0.1:8443/msi/token",
        ...     identity_secret="s",
        ...     ca_file="/tmp/ca.pem",
        ...     session_id="session-1",
        ... )
        >>> env["FOUNDRY_HOSTING_ENVIRONMENT"], env["AZURE_TOKEN_CREDENTIALS"]
        ('emulator', 'ManagedIdentityCredential')
    """
    return {
        # What the platform sets on a hosted agent's container:
        HOSTING_ENV: "emulator",
        PROJECT_ENDPOINT_ENV: endpoint,
        "FOUNDRY_AGENT_SESSION_ID": session_id,
        # Its managed identity, served by the emulator; DefaultAzureCredential tries nothing else:
        "IDENTITY_ENDPOINT": identity_endpoint,
        "IDENTITY_HEADER": identity_secret,
        "AZURE_TOKEN_CREDENTIALS": "ManagedIdentityCredential",
        # Trust the emulator's certificate (read when the process starts; it replaces the
        # system CA bundle for that process, which then reaches nothing else over TLS):
        "SSL_CERT_FILE": ca_file,
        **_TELEMETRY_OFF,
    }
