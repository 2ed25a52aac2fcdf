"""``{% share_health_banner %}``: the stale-shares banner (``scheduling.health.banner``).

Included by the dashboard, the team pages and the approval queue; two queries per page (the
banner is the one tag here that reads the database: it is what the page is about to show stale).
"""

from __future__ import annotations

from django import template

from quotas.querysets import is_site_admin
from scheduling.health import banner

register = template.Library()


@register.inclusion_tag("_partials/share_health_banner.html", takes_context=True)
def share_health_banner(context) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "banner": banner(),
        "is_admin": bool(user is not None and user.is_authenticated and is_site_admin(user)),
    }
