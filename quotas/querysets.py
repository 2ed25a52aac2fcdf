"""Team scoping: the one place that decides which teams a user may see.

Rules (DESIGN.md, security model): site admins (superusers or the ``admins`` group) see every
team; a lead sees their team and its sub-teams (departments' children, any depth); members and
viewers see their own team; everyone else sees nothing. Every view, API endpoint and admin page
filters through ``visible_to``; it compiles to one SQL query with subqueries.

The models module builds its managers from these querysets, so this module never imports it:
the models it needs are reached through the queryset's own model (``self.model``) and its
relations (a team's ``memberships``, a scoped row's ``team``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from quotas.choices import MembershipRole

MAX_DEPTH = 4  # matches models.MAX_HIERARCHY_DEPTH


def is_site_admin(user) -> bool:
    """Return True for superusers and members of the admins group (cached on the user object)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    cached = getattr(user, "_fairshare_is_admin", None)
    if cached is None:
        cached = user.is_superuser or user.groups.filter(name=settings.ADMINS_GROUP).exists()
        user._fairshare_is_admin = cached
    return cached


def _visible_teams_q(memberships, user) -> Q:
    """The teams ``user`` may see; ``memberships`` is the Membership model (Team's reverse
    ``memberships`` relation)."""
    member_of = memberships.objects.filter(user=user).values("team_id")
    lead_of = memberships.objects.filter(user=user, role=MembershipRole.LEAD).values("team_id")
    condition = Q(id__in=member_of)
    path = "parent_id"
    for _ in range(MAX_DEPTH):
        condition |= Q(**{f"{path}__in": lead_of})
        path = "parent__" + path
    return condition


class TeamQuerySet(models.QuerySet):
    def _membership_model(self):
        return self.model._meta.get_field("memberships").related_model

    def bulk_create(self, objs, *args, **kwargs):
        """As ``Model.save`` does: a new team's fixed cluster name is its slug at creation."""
        objs = list(objs)
        for team in objs:
            if not team.cluster_name:
                team.cluster_name = team.slug
        return super().bulk_create(objs, *args, **kwargs)

    def visible_to(self, user) -> TeamQuerySet:
        if is_site_admin(user):
            return self.all()
        if user is None or not user.is_authenticated or not user.is_active:
            return self.none()
        return self.filter(_visible_teams_q(self._membership_model(), user))

    def led_by(self, user) -> TeamQuerySet:
        """Teams the user may manage: admins all, leads their team and its sub-teams."""
        if is_site_admin(user):
            return self.all()
        if user is None or not user.is_authenticated or not user.is_active:
            return self.none()
        lead_of = (
            self._membership_model()
            .objects.filter(user=user, role=MembershipRole.LEAD)
            .values("team_id")
        )
        condition = Q(id__in=lead_of)
        path = "parent_id"
        for _ in range(MAX_DEPTH):
            condition |= Q(**{f"{path}__in": lead_of})
            path = "parent__" + path
        return self.filter(condition)


class TeamScopedQuerySet(models.QuerySet):
    """For models with a ``team`` foreign key; rows without a team are visible to admins only."""

    team_field = "team"

    def visible_to(self, user) -> TeamScopedQuerySet:
        team = self.model._meta.get_field(self.team_field).related_model
        if is_site_admin(user):
            return self.all()
        if user is None or not user.is_authenticated or not user.is_active:
            return self.none()
        return self.filter(**{f"{self.team_field}__in": team.objects.visible_to(user)})
