"""The chat webhook (``FAIRSHARE_WEBHOOK_URL``) every notification also goes to.

The body is Slack-compatible JSON ``{"text": ...}`` (Slack, Mattermost and Rocket.Chat incoming
webhooks all accept it). Delivery is best effort: failures are logged, never raised.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from http.client import HTTPException

from django.conf import settings

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 5.0


def post_webhook(text: str, *, url: str | None = None) -> bool:
    """POST ``{"text": text}`` to ``url`` (default ``FAIRSHARE_WEBHOOK_URL``).

    Return True when the webhook answered 2xx, False when none is configured or it failed
    (logged; the URL is not logged since it usually embeds a secret).
    """
    url = url if url is not None else getattr(settings, "FAIRSHARE_WEBHOOK_URL", "")
    if not url:
        return False
    if not url.startswith(("https://", "http://")):
        logger.error("FAIRSHARE_WEBHOOK_URL must be an http(s) URL; notification not sent")
        return False
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "fairshare"},
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:
            response.read()
    except urllib.error.HTTPError as e:
        logger.error("webhook answered HTTP %s; notification not delivered", e.code)
        return False
    except (urllib.error.URLError, HTTPException, OSError) as e:
        logger.error("webhook unreachable (%s); notification not delivered", e)
        return False
    return True
