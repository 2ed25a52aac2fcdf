from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command

from quotas.models import QuotaRequest, Team, TeamQuota

pytestmark = pytest.mark.django_db

IGNORED_FIELDS = {
    "created",
    "updated",
    "last_login",
    "date_joined",
    "taken_at",
    "decided_at",
    "activated_at",
    "window_start",
    "window_end",
}


def database_state() -> dict:
    state = {}
    for label in ("quotas", "monitoring", "auth"):
        for model in apps.get_app_config(label).get_models():
            fields = [
                f.attname for f in model._meta.concrete_fields if f.name not in IGNORED_FIELDS
            ]
            state[model._meta.label] = sorted(
                tuple(str(v) for v in row) for row in model.objects.values_list(*fields)
            )
    return state


def test_seed_demo_builds_the_source_documents_scenario():
    out = StringIO()
    call_command("seed_demo", stdout=out)
    research = Team.objects.get(slug="research-team")
    production = Team.objects.get(slug="production-team")
    assert (research.weight, research.reclaimable) == (1, True)
    assert (production.weight, production.reclaimable) == (3, False)
    limits = {q.resource: q.limit_display for q in TeamQuota.objects.filter(team=research)}
    assert limits == {"cpu": "512", "memory": "2Ti", "nvidia.com/gpu": "64"}
    assert Team.objects.filter(active=True).count() >= 5
    statuses = set(QuotaRequest.objects.values_list("status", flat=True))
    assert {"pending", "approved", "rejected"} <= statuses
    assert "rita" in out.getvalue() and "rita-demo-pass" in out.getvalue()


def test_seed_demo_twice_changes_nothing():
    call_command("seed_demo", "--quiet")
    first = database_state()
    call_command("seed_demo", "--quiet")
    assert database_state() == first
