"""Where Tinker service clients come from.

`service_client_factory` is the one seam between emojikit and the network: tests replace it
with a fake that speaks the SDK's types at its client boundary.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from emojikit.api.secrets import require_key

from emojikit_tinker.config import API_KEY_VAR


def _sdk_service_client(base_url: Optional[str], api_key: str) -> Any:
    import tinker

    return tinker.ServiceClient(base_url=base_url, api_key=api_key)


# (base_url, api_key) -> a tinker.ServiceClient (or an object with its interface).
service_client_factory: Callable[[Optional[str], str], Any] = _sdk_service_client


def make_service_client(base_url: Optional[str], what: str) -> Any:
    """A service client; the API key is checked first, so a missing key never reaches the SDK."""
    api_key = require_key(API_KEY_VAR, what)
    return service_client_factory(base_url, api_key)


def _sdk_rest_client(base_url: Optional[str], api_key: str) -> Any:
    import tinker

    return tinker.RestClient(base_url=base_url, api_key=api_key)


# (base_url, api_key) -> a tinker.RestClient (checkpoint downloads); replaced by tests like the above.
rest_client_factory: Callable[[Optional[str], str], Any] = _sdk_rest_client


def make_rest_client(base_url: Optional[str], what: str) -> Any:
    return rest_client_factory(base_url, require_key(API_KEY_VAR, what))
