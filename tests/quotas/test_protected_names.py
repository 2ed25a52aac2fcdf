"""Issue 25, items 1 and 2: protected namespaces and names that cannot break the sync.

Each refused name at every entry point (API, Django admin, management command, the model's
validation every service calls) with an error naming the rule; the renderer and the sync never
write into a protected namespace even when the database holds one; a namespace Fairshare did
not create is written into only once a site admin adopted it, and is never deleted.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from config.env import env_own_namespace
from quotas.domain.names import protected_by, team_slug_errors, tier_name_errors
from quotas.models import Namespace, PriorityTier, Team
from scheduling.desired import build_cluster_spec
from scheduling.domain.render import render
from tests.base import PASSWORD

pytestmark = pytest.mark.django_db

PROTECTED = ["kube-system", "kube-public", "default", "volcano-system", "volcano-monitoring"]


# ------------------------------------------------------------------ the pure rules


def test_one_definition_of_the_name_rules():
    assert any("reserved" in e for e in team_slug_errors("root"))
    assert any("reserved" in e for e in team_slug_errors("default"))
    assert team_slug_errors("research") == []
    assert any("system-" in e for e in tier_name_errors("system-gold"))
    assert tier_name_errors("gold") == []
    assert team_slug_errors("Bad_Name") and team_slug_errors("a" * 64)
    patterns = ("kube-*", "default", "volcano-*")
    assert [protected_by(n, patterns) for n in ("kube-system", "default", "volcano-x", "ml")] == [
        "kube-*",
        "default",
        "volcano-*",
        None,
    ]
    assert protected_by("defaults", patterns) is None  # a pattern, not a prefix


def test_the_namespace_fairshare_runs_in_is_found(tmp_path):
    file = tmp_path / "namespace"
    file.write_text("fairshare-system\n")
    own = env_own_namespace
    assert own("FAIRSHARE_NAMESPACE", "in-cluster", environ={}, namespace_file=str(file)) == (
        "fairshare-system"
    )
    assert own("FAIRSHARE_NAMESPACE", "kubeconfig", environ={}, namespace_file=str(file)) == ""
    assert own("FAIRSHARE_NAMESPACE", "in-cluster", environ={"POD_NAMESPACE": "fs"}) == "fs"
    environ = {"POD_NAMESPACE": "fs", "FAIRSHARE_NAMESPACE": "ops"}
    assert own("FAIRSHARE_NAMESPACE", "in-cluster", environ=environ) == "ops"
    missing = str(tmp_path / "absent")
    assert own("FAIRSHARE_NAMESPACE", "in-cluster", environ={}, namespace_file=missing) == ""


# ------------------------------------------------------------------ model validation (services)


@pytest.mark.parametrize("name", PROTECTED)
def test_a_protected_namespace_is_refused_naming_the_rule(cast, name):
    with pytest.raises(ValidationError) as caught:
        Namespace(name=name, team=cast.team_a).full_clean()
    [message] = caught.value.message_dict["name"]
    assert "protected namespace" in message and "FAIRSHARE_PROTECTED_NAMESPACES" in message


def test_the_deny_list_and_fairshares_own_namespace_come_from_settings(cast, settings):
    settings.FAIRSHARE_PROTECTED_NAMESPACES = ["infra-*"]
    settings.FAIRSHARE_NAMESPACE = "fairshare"
    with pytest.raises(ValidationError, match="infra-\\*"):
        Namespace(name="infra-logging", team=cast.team_a).full_clean()
    with pytest.raises(ValidationError, match="namespace Fairshare itself runs in"):
        Namespace(name="fairshare", team=cast.team_a).full_clean()
    Namespace(name="kube-system", team=cast.team_a).full_clean()  # the list was replaced


# ------------------------------------------------------------------ the API


@pytest.fixture
def api(cast):
    client = APIClient()
    client.force_authenticate(cast.root)
    return client


def test_the_api_refuses_each_name_with_a_field_error(cast, api):
    client = api
    for name in PROTECTED:
        answer = client.post(
            reverse("quotas-api:namespace-list"), {"name": name, "team": "team-a"}, format="json"
        )
        assert answer.status_code == 400, name
        assert "protected namespace" in answer.json()["errors"]["name"][0]
    for slug in ("root", "default"):
        answer = client.post(
            reverse("quotas-api:team-list"), {"slug": slug, "name": slug}, format="json"
        )
        assert answer.status_code == 400
        assert "reserved" in answer.json()["errors"]["slug"][0]
    renamed = client.patch(
        reverse("quotas-api:team-detail", args=["team-a"]), {"slug": "root"}, format="json"
    )
    assert renamed.status_code == 400 and "Volcano" in renamed.json()["errors"]["slug"][0]
    tier = client.post(
        reverse("quotas-api:prioritytier-list"),
        {"name": "system-gold", "value": 10, "preemption_policy": "Never"},
        format="json",
    )
    assert tier.status_code == 400 and "system-" in tier.json()["errors"]["name"][0]
    assert not Namespace.objects.filter(name__in=PROTECTED).exists()
    assert not Team.objects.filter(slug__in=["root", "default"]).exists()
    assert not PriorityTier.objects.filter(name="system-gold").exists()


def test_an_admin_may_adopt_through_the_api_explicitly(cast, api):
    answer = api.post(
        reverse("quotas-api:namespace-list"),
        {"name": "legacy-ml", "team": "team-a", "adopted": True},
        format="json",
    )
    assert answer.status_code == 201 and answer.json()["adopted"] is True


# ------------------------------------------------------------------ the Django admin


@pytest.fixture
def site_admin(cast):
    client = Client()
    assert client.login(username="root", password=PASSWORD)
    return client


def test_the_django_admin_refuses_each_name_with_a_form_error(cast, site_admin):
    answer = site_admin.post(
        reverse("admin:quotas_namespace_add"),
        {
            "name": "kube-system",
            "team": cast.team_a.pk,
            "labels": "{}",
            "share": 1,
            "managed": "on",
        },
    )
    assert answer.status_code == 200  # the form again, with the error
    assert "protected namespace" in answer.content.decode()
    answer = site_admin.post(
        reverse("admin:quotas_team_add"),
        {
            "slug": "root",
            "name": "Root",
            "weight": 1,
            "reclaimable": "on",
            "active": "on",
            "memberships-TOTAL_FORMS": 0,
            "memberships-INITIAL_FORMS": 0,
            "quotas-TOTAL_FORMS": 0,
            "quotas-INITIAL_FORMS": 0,
        },
    )
    assert answer.status_code == 200 and "reserved" in answer.content.decode()
    answer = site_admin.post(
        reverse("admin:quotas_prioritytier_add"),
        {"name": "system-gold", "value": 10, "preemption_policy": "Never"},
    )
    assert answer.status_code == 200 and "reserved by Kubernetes" in answer.content.decode()
    assert not Namespace.objects.filter(name="kube-system").exists()
    assert not Team.objects.filter(slug="root").exists()
    assert not PriorityTier.objects.filter(name="system-gold").exists()


# ------------------------------------------------------------------ management commands


@pytest.mark.parametrize("name", ["kube-system", "default", "volcano-system"])
def test_adopt_namespace_refuses_a_protected_namespace_naming_the_rule(cast, name):
    with pytest.raises(CommandError, match="protected namespace"):
        call_command("adopt_namespace", name, team="team-a", confirm=True)
    assert not Namespace.objects.filter(name=name).exists()


def test_adopt_namespace_shows_what_will_be_written_and_changes_nothing_unconfirmed(cast, capsys):
    call_command("adopt_namespace", "legacy-ml", team="team-a")
    out = capsys.readouterr().out
    assert "annotation fairshare.io/adopted=true" in out
    assert "annotation scheduling.volcano.sh/queue-name=team-a" in out
    assert "ResourceQuota fairshare: requests.nvidia.com/gpu=" in out
    assert "RoleBinding fairshare-lead: User alice → ClusterRole admin" in out
    assert "Nothing changed" in out
    assert not Namespace.objects.filter(name="legacy-ml").exists()
    call_command("adopt_namespace", "legacy-ml", team="team-a", confirm=True)
    assert Namespace.objects.get(name="legacy-ml").adopted


# ------------------------------------------------------------------ renderer and sync


def test_the_renderer_writes_nothing_into_a_protected_namespace_in_the_database(cast, settings):
    # Written around the rules (bulk_create skips validation), as old data or a raw fix would.
    Namespace.objects.bulk_create(
        [Namespace(name="kube-system", team=cast.team_a), Namespace(name="ops", team=cast.team_a)]
    )
    settings.FAIRSHARE_NAMESPACE = "ops"
    manifests = render(build_cluster_spec())
    touched = {m["metadata"].get("namespace") or m["metadata"]["name"] for m in manifests}
    assert "team-a-ml" in touched
    assert "kube-system" not in touched and "ops" not in touched


@pytest.fixture
def cluster(kubeapi, settings):
    settings.FAIRSHARE_CLUSTER = f"kubeconfig:{kubeapi.kubeconfig_path}"
    settings.FAIRSHARE_KUBE_TIMEOUT = 5
    return kubeapi


def _sync():
    from scheduling.sync import create_run, run_sync

    run = run_sync(create_run().pk)
    run.refresh_from_db()
    return run


def test_the_sync_never_writes_into_a_protected_namespace(cast, cluster):
    Namespace.objects.bulk_create([Namespace(name="kube-system", team=cast.team_a)])
    run = _sync()
    assert run.status == "succeeded", run.error
    assert cluster.objects("ResourceQuota", "kube-system") == []
    assert cluster.objects("RoleBinding", "kube-system") == []
    labels = cluster.get("Namespace", "kube-system")["metadata"]["labels"]
    assert "app.kubernetes.io/managed-by" not in labels
    assert cluster.objects("ResourceQuota", "team-a-ml")  # the rest went out
    assert "Skipped namespace kube-system of team team-a: 'kube-system' is a protected" in run.log


def _existing(cluster, name, labels=None):
    cluster.put_object(
        {"kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}, "status": {}}
    )


def test_a_namespace_fairshare_did_not_create_is_written_into_only_once_adopted(cast, cluster):
    _existing(cluster, "legacy-ml")
    Namespace.objects.create(name="legacy-ml", team=cast.team_a)
    run = _sync()
    assert run.status == "failed"
    refused = run.items.get(kind="Namespace", name="legacy-ml")
    assert refused.action == "failed" and "did not create" in refused.error
    assert "adopt_namespace legacy-ml" in refused.error
    assert run.items.filter(namespace="legacy-ml", action="failed").count() >= 4
    assert cluster.objects("RoleBinding", "legacy-ml") == []  # nobody was bound in it
    assert cluster.objects("ResourceQuota", "team-b-ml")  # the rest of the run went on

    call_command("adopt_namespace", "legacy-ml", team="team-a", confirm=True)
    run = _sync()
    assert run.status == "succeeded", run.error
    live = cluster.get("Namespace", "legacy-ml")
    assert live["metadata"]["annotations"]["fairshare.io/adopted"] == "true"
    assert cluster.objects("RoleBinding", "legacy-ml")


def test_a_namespace_another_manager_owns_is_refused_even_adopted(cast, cluster):
    _existing(cluster, "argo-apps", {"app.kubernetes.io/managed-by": "argocd"})
    Namespace.objects.create(name="argo-apps", team=cast.team_a, adopted=True)
    run = _sync()
    refused = run.items.get(kind="Namespace", name="argo-apps")
    assert refused.action == "failed"
    assert "app.kubernetes.io/managed-by=argocd" in refused.error
    assert cluster.get("Namespace", "argo-apps")["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "argocd"
    }
    assert cluster.objects("RoleBinding", "argo-apps") == []


def test_an_adopted_namespace_is_never_deleted_even_when_namespaces_are_pruned(
    cast, cluster, settings
):
    settings.FAIRSHARE_SYNC_PRUNE_NAMESPACES = True
    _existing(cluster, "legacy-ml")
    call_command("adopt_namespace", "legacy-ml", team="team-a", confirm=True)
    Namespace.objects.create(name="made-here", team=cast.team_a)
    assert _sync().status == "succeeded"
    Namespace.objects.filter(name__in=["legacy-ml", "made-here"]).delete()
    run = _sync()
    assert run.status == "succeeded", run.error
    assert cluster.get("Namespace", "made-here") is None  # Fairshare created it: pruned
    kept = cluster.get("Namespace", "legacy-ml")
    assert kept is not None  # adopted: released, never deleted
    assert "app.kubernetes.io/managed-by" not in (kept["metadata"].get("labels") or {})
    assert cluster.objects("RoleBinding", "legacy-ml") == []


def test_the_demo_seed_refuses_a_protected_namespace_and_seeds_nothing(db, settings):
    settings.FAIRSHARE_NAMESPACE = "research-ml"  # Fairshare deployed into a demo namespace
    with pytest.raises(CommandError, match="namespace Fairshare itself runs in"):
        call_command("seed_demo", quiet=True)
    assert not Team.objects.exists() and not Namespace.objects.exists()


def test_many_new_namespaces_are_looked_up_with_one_list(cast, cluster):
    _existing(cluster, "bulk-07")
    Namespace.objects.bulk_create(
        [Namespace(name=f"bulk-{n:02d}", team=cast.team_b) for n in range(25)]
    )
    cluster.reset_counts()
    run = _sync()
    assert cluster.counts[("list", "Namespace")] == 2  # the managed ones, then all of them
    assert cluster.counts.get(("get", "Namespace"), 0) == 0
    failed = set(run.items.filter(action="failed").values_list("namespace", "name"))
    assert ("", "bulk-07") in failed and all(ns in ("", "bulk-07") for ns, _ in failed)
    assert cluster.objects("ResourceQuota", "bulk-08")


def test_the_team_page_marks_an_adopted_namespace(cast):
    Namespace.objects.create(name="legacy-ml", team=cast.team_a, adopted=True)
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    page = client.get(reverse("portal:team", args=["team-a"])).content.decode()
    assert "adopted (existed before Fairshare; never deleted)" in page
    assert page.count("adopted (") == 1  # team-a-ml was created by Fairshare


def test_the_adoption_page_previews_refuses_and_adopts(cast, site_admin):
    url = reverse("portal:adopt_namespace")
    assert site_admin.get(url).status_code == 200
    preview = site_admin.post(url, {"name": "legacy-ml", "team": "team-a", "action": "preview"})
    text = preview.content.decode()
    assert "annotation fairshare.io/adopted=true" in text
    assert "RoleBinding fairshare-lead: User alice → ClusterRole admin" in text
    assert not Namespace.objects.filter(name="legacy-ml").exists()
    refused = site_admin.post(url, {"name": "kube-system", "team": "team-a", "action": "adopt"})
    assert refused.status_code == 200 and "protected namespace" in refused.content.decode()
    taken = site_admin.post(url, {"name": "team-b-ml", "team": "team-a", "action": "preview"})
    assert "already belongs to team team-b" in taken.content.decode()
    done = site_admin.post(url, {"name": "legacy-ml", "team": "team-a", "action": "adopt"})
    assert done.status_code == 302 and Namespace.objects.get(name="legacy-ml").adopted
    lead = Client()
    assert lead.login(username="alice", password=PASSWORD)
    assert lead.get(url).status_code == 403


@pytest.mark.parametrize("slug", ["root", "default", "research", "a" * 63, "x-1"])
def test_entry_and_the_renderer_accept_exactly_the_same_team_slugs(cast, slug):
    from quotas.domain import names
    from scheduling.domain import render as renderer
    from scheduling.domain.types import ClusterSpec, TeamSpec

    assert renderer.RESERVED_QUEUE_NAMES is names.RESERVED_QUEUE_NAMES
    assert renderer.OWN_QUEUE_SUFFIX is names.OWN_QUEUE_SUFFIX
    try:
        Team(slug=slug, name="x").full_clean()
        accepted = True
    except ValidationError:
        accepted = False
    try:
        render(ClusterSpec(teams=(TeamSpec(slug),)))
        rendered = True
    except ValueError:
        rendered = False
    assert accepted == rendered == (slug not in ("root", "default"))


@pytest.mark.parametrize("tier", ["system-gold", "gold"])
def test_entry_and_the_renderer_accept_exactly_the_same_tier_names(cast, tier):
    from scheduling.domain.types import TierSpec

    try:
        PriorityTier(name=tier, value=1).full_clean()
        accepted = True
    except ValidationError:
        accepted = False
    try:
        TierSpec(tier, 1, "Never")
        rendered = True
    except ValueError:
        rendered = False
    assert accepted == rendered == (tier == "gold")
