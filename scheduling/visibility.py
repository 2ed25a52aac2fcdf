"""Share visibility: whose fair-share numbers a person sees (``FAIRSHARE_SHARE_VISIBILITY``).

Fair-share numbers are a team's name with its weight, usage, dominant share and DRF fair
allocation (``ShareSnapshot`` rows and what-if previews). Two policies, as Slurm has them:

* ``own`` (the default, like Slurm's ``PrivateData=usage``): people see the numbers of the
  teams they can see anyway (``Team.objects.visible_to``); in previews the other teams appear
  only together, as one anonymous "other teams" line, so a lead still sees what a request takes
  from everyone else without learning who they are.
* ``all`` (like Slurm's ``sshare`` without ``PrivateData``): every signed-in person sees every
  team's fair-share numbers (not its quotas, requests, members or usage records).

Site admins see everything in both. The same rule serves the previews, the dashboard and the
API; ``/metrics`` is an operator endpoint (its token is an admin credential), so it carries
every team in both modes.
"""

from __future__ import annotations

from django.conf import settings

from quotas.models import Team
from quotas.querysets import is_site_admin

ALL = "all"
OWN = "own"
CHOICES = (OWN, ALL)


def share_visibility() -> str:
    return getattr(settings, "FAIRSHARE_SHARE_VISIBILITY", OWN)


def sees_every_share(user) -> bool:
    if is_site_admin(user):
        return True
    active = user is not None and user.is_authenticated and user.is_active
    return active and share_visibility() == ALL


def share_slugs(user) -> frozenset[str] | None:
    """Slugs of the teams whose numbers ``user`` may see; None means every team."""
    if sees_every_share(user):
        return None
    return frozenset(Team.objects.visible_to(user).values_list("slug", flat=True))
