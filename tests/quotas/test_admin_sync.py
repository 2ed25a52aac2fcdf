"""Edits in the Django admin reach the cluster as the product's own changes do: after commit, a
targeted sync of every team the edit touched (before and after), or a full one for cluster-wide
objects and renamed teams (quotas.admin.SyncsTheCluster, through the real receiver)."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

import pytest
from celery.canvas import _chain
from django.contrib import admin
from django.test import RequestFactory

from quotas.admin import NamespaceAdmin, PriorityTierAdmin, TeamAdmin, TeamQuotaAdmin
from quotas.models import Namespace, PriorityTier, Team, TeamQuota
from scheduling import tasks
from tests.base import GPU

pytestmark = pytest.mark.django_db


class Asked(list):
    pass


@pytest.fixture
def syncs(django_capture_on_commit_callbacks):
    """The targeted syncs (their team slugs; None for a full sync) the edits asked for; an
    ``edit`` commits (runs its on-commit callbacks) before it returns."""
    asked = Asked()
    with (
        mock.patch.object(_chain, "apply_async", autospec=True),
        mock.patch.object(
            tasks.sync_cluster, "delay", side_effect=lambda **kw: asked.append(kw["teams"])
        ),
    ):
        asked.commit = django_capture_on_commit_callbacks
        yield asked


def edit(model_admin, obj, cast, syncs, *, delete=False):
    request = RequestFactory().post("/")
    request.user = cast.root
    with syncs.commit(execute=True):
        if delete:
            model_admin(type(obj), admin.site).delete_model(request, obj)
        else:
            model_admin(type(obj), admin.site).save_model(request, obj, form=None, change=True)


def test_moving_a_team_syncs_it_and_both_departments(cast, syncs):
    other = Team.objects.create(slug="dept-y", name="Department Y")
    team = Team.objects.get(pk=cast.team_a.pk)
    team.parent = other

    edit(TeamAdmin, team, cast, syncs)

    assert syncs == [["dept-x", "dept-y", "team-a"]]


def test_a_weight_change_syncs_the_team_and_its_department(cast, syncs):
    team = Team.objects.get(pk=cast.team_b.pk)
    team.weight = 7

    edit(TeamAdmin, team, cast, syncs)

    assert syncs == [["dept-x", "team-b"]]


def test_renaming_a_team_is_an_ordinary_targeted_sync_by_its_fixed_cluster_name(cast, syncs):
    # Issue 25: the cluster sees the name the team was created with, so a rename changes
    # nothing there and needs no full sync.
    team = Team.objects.get(pk=cast.team_b.pk)
    team.slug = "team-b2"

    edit(TeamAdmin, team, cast, syncs)

    assert syncs == [["dept-x", "team-b"]]


def test_moving_a_namespace_syncs_the_team_it_left_and_the_one_it_joined(cast, syncs):
    namespace = Namespace.objects.get(name="team-a-ml")
    namespace.team = cast.team_b

    edit(NamespaceAdmin, namespace, cast, syncs)

    assert syncs == [["team-a", "team-b"]]


def test_a_quota_edited_in_the_admin_syncs_its_team(cast, syncs):
    quota = TeamQuota.objects.get(team=cast.team_a, resource=GPU)
    quota.limit = Decimal(41)

    edit(TeamQuotaAdmin, quota, cast, syncs)

    assert syncs == [["team-a"]]


def test_a_priority_tier_is_cluster_wide(cast, syncs):
    tier = PriorityTier.objects.get(pk=cast.tier.pk)
    tier.value = 100001

    edit(PriorityTierAdmin, tier, cast, syncs)

    assert syncs == [None]


def test_deleting_a_namespace_in_the_admin_syncs_its_team(cast, syncs):
    namespace = Namespace.objects.get(name="team-b-ml")

    edit(NamespaceAdmin, namespace, cast, syncs, delete=True)

    assert syncs == [["team-b"]]
