"""A JWT's claims, read without verifying it: for what a caller does with a token someone else verifies (the facts
agent renews its token before `exp`; the console ends a session at its viewer's `exp`, after a TokenReview). Pure."""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def claims(token: str) -> dict[str, Any] | None:
    """The token's claims (its middle part), or None when it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        found = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    return found if isinstance(found, dict) else None
