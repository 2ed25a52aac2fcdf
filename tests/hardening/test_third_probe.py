"""The third outside probe's findings (issue 27), one test (or a few) per finding. Sign-in
throttling is in tests/config/test_signin.py."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import SyncStatus
from scheduling.models import SyncRun

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# ------------------------------------------------- share visibility: the sync-run pages


@pytest.fixture
def targeted_run(cast):
    now = timezone.now()
    return SyncRun.objects.create(
        status=SyncStatus.SUCCEEDED,
        trigger="quota-change:approve",
        requested_by=cast.charlie,
        scope={"teams": ["team-a", "team-b"]},
        started_at=now,
        finished_at=now,
    )


@pytest.mark.parametrize("page", ["list", "detail"])
def test_sync_pages_name_no_other_team_trigger_or_requester(cast, targeted_run, settings, page):
    settings.FAIRSHARE_SHARE_VISIBILITY = "own"
    url = (
        reverse("scheduling:syncrun_list")
        if page == "list"
        else reverse("scheduling:syncrun", args=[targeted_run.pk])
    )
    outsider = signed_in(cast.nobody).get(url).content.decode()
    assert "team-a" not in outsider and "team-b" not in outsider
    assert "charlie" not in outsider
    assert "quota-change:approve" not in outsider
    assert "2 others" in outsider
    alice = signed_in(cast.alice).get(url).content.decode()
    assert "team-a" in alice and "team-b" not in alice and "1 other" in alice
    assert "charlie" not in alice
    # The lead who started it sees that it was them; an admin sees everything.
    assert "by charlie" in signed_in(cast.charlie).get(url).content.decode()
    root = signed_in(cast.root).get(url).content.decode()
    assert "team-b" in root and "by charlie" in root and "quota-change:approve" in root
    # Share visibility "all": every team's name, still not who started it.
    settings.FAIRSHARE_SHARE_VISIBILITY = "all"
    alice = signed_in(cast.alice).get(url).content.decode()
    assert "team-b" in alice and "charlie" not in alice
