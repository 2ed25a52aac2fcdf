"""Access helpers used by every view and API endpoint.

Shaped like Healthchecks' ``_get_check_for_user``.
"""

from __future__ import annotations

from django.http import Http404

from quotas.models import Team
from quotas.querysets import is_site_admin

__all__ = ["can_manage_team", "get_team_for_user", "is_site_admin"]


def can_manage_team(user, team: Team) -> bool:
    """Admins manage every team; leads manage their team and its sub-teams."""
    return Team.objects.led_by(user).filter(pk=team.pk).exists()


def get_team_for_user(user, slug: str) -> tuple[Team, bool]:
    """Return (team, can_write) for a team the user may see.

    Raises Http404 for teams the user may not see, so outsiders cannot tell a team exists.
    ``can_write`` is True for admins and for leads of the team or of one of its departments.
    """
    try:
        team = Team.objects.visible_to(user).get(slug=slug)
    except Team.DoesNotExist:
        raise Http404("No such team.") from None
    return team, can_manage_team(user, team)
