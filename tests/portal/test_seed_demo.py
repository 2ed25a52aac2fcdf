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


def test_the_demo_clusters_sync_shows_drift_an_update_a_prune_and_applies_nothing(settings):
    """The demo snapshot holds what an earlier sync left (scripts/make_demo_cluster.py): a
    plan-only sync of the seeded demo finds the hand edit, the stale Queue and the leftover."""
    from pathlib import Path

    from scheduling.choices import SyncAction
    from scheduling.sync import PLAN_ONLY, create_run, run_sync

    fixture = Path(settings.BASE_DIR) / "monitoring" / "fixtures" / "demo_cluster.json"
    settings.FAIRSHARE_CLUSTER = f"snapshot:{fixture}"
    before = fixture.read_bytes()
    call_command("seed_demo", quiet=True)

    run = run_sync(create_run(dry_run=False).pk)
    run.refresh_from_db()

    assert run.status == "succeeded" and run.dry_run and PLAN_ONLY in run.log
    drifted = list(run.items.filter(drift=True).values_list("kind", "namespace", "name"))
    assert drifted == [("ResourceQuota", "research-ml", "fairshare")]
    updated = set(run.items.filter(action=SyncAction.UPDATE).values_list("kind", "name"))
    assert ("Queue", "production-team") in updated
    pruned = list(run.items.filter(action=SyncAction.PRUNE).values_list("kind", "name"))
    assert pruned == [("RoleBinding", "fairshare-member-former-intern")]
    assert run.created_count == 0 and run.unchanged_count >= 40
    assert fixture.read_bytes() == before
