"""The authorization matrix: every URL pattern × every role × GET and each write method.

The routes come from ``get_resolver()`` (walked recursively, admin apart); each must have a row
in ``ROUTES`` below, or ``test_every_route_is_classified`` fails — a new page or endpoint has
to be classified before it ships. Rows name team-a's objects in their URLs (``world``), so
"charlie (lead of team-b) gets 404 on team-a's things" is checked for every route with an id,
and ``test_outsiders_cannot_tell_a_team_a_object_from_a_missing_one`` checks that an outsider's
answer for a real team-a id is the answer for an id that does not exist (no existence oracle).

Expected outcomes, one per role in ``ROLES`` order
(anon vic bob charlie alice dora root svc_cb svc_all agent):

    ok     2xx                       login  302 to the login page
    3xx    any other redirect        401 400 403 404 405 409: that status

People use sessions; tokens send ``Authorization: Bearer``. The UI ignores bearer tokens (they
are for the API), so tokens are anonymous there: ``login``. The two service tokens belong to
root (as ``/api/v1/service-tokens/`` issues them) and see what root sees within their scopes.
Each role's request runs in a savepoint that is rolled back, so one role's write (a withdrawal,
an approval) never changes what the next role meets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from django.http import HttpResponse
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.viewsets import ViewSetMixin

from quotas.models import Team
from tests.base import GPU
from tests.hardening.conftest import (
    ROLES,
    World,
    client_for,
    seeded_cluster_group,
    seeded_group_rule,
)

pytestmark = pytest.mark.django_db

Body = Callable[[World], Any]


@dataclass(frozen=True)
class Route:
    """How to reach one URL pattern and what each role gets, per method.

    ``methods`` maps an HTTP method to (expected outcomes, body factory or None).
    """

    kwargs: Callable[[World], dict] | None = None  # URL kwargs naming team-a's object
    methods: dict[str, tuple[str, Body | None]] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    shared: bool = False  # the object in the URL is not team-a's (a run, a rate, a tier...)


def r(
    kwargs: Callable[[World], dict] | None = None, *, query=None, shared=False, **methods
) -> Route:
    """``r(lambda w: {...}, GET="…", POST=("…", body))``."""
    table = {
        method: (spec, None) if isinstance(spec, str) else spec for method, spec in methods.items()
    }
    for method, (outcomes, _body) in table.items():
        assert len(outcomes.split()) == len(ROLES), (method, outcomes)
    return Route(kwargs, table, query or {}, shared)


# ------------------------------------------------------------------ bodies


def waiting_transition(w: World) -> int:
    """A waiting deactivation of team-a (issue 25), created on first use."""
    from django.utils import timezone

    from quotas.models import Transition

    transition, _ = Transition.objects.get_or_create(
        team=w.cast.team_a,
        state="waiting",
        defaults={
            "kind": "deactivate",
            "params": {"queues": ["team-a"], "previous_parent": w.cast.dept.pk, "new": False},
            "since": timezone.now(),
        },
    )
    return transition.pk


def request_form(w: World) -> dict:
    """The UI request form for team-a: GPUs 20/40 → 30/50."""
    return {
        "lines-TOTAL_FORMS": "2",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
        "lines-0-guarantee": "30",
        "lines-0-limit": "50",
        "lines-1-resource": "",
        "lines-1-guarantee": "",
        "lines-1-limit": "",
        "justification": "More GPUs.",
        "tz": "UTC",
    }


def quota_edit_form(w: World) -> dict:
    """The direct quota edit of team-a: GPUs 20/40 → 30/50."""
    form = request_form(w)
    del form["justification"], form["tz"]
    return form | {"note": "Direct edit."}


def token_form(w: World) -> dict:
    from datetime import timedelta

    from django.utils import timezone

    return {
        "name": "ci",
        "kind": "personal",
        "expires_on": (timezone.now() + timedelta(days=30)).date().isoformat(),
    }


def decision_form(w: World) -> dict:
    p = f"r{w.request.pk}"
    return {"decision": "approve", f"{p}-line0_guarantee": "24", f"{p}-line0_limit": "48"}


def rebalance_form(w: World) -> dict:
    teams = list(Team.objects.filter(active=True).order_by("slug").prefetch_related("quotas"))
    data = {
        "teams-TOTAL_FORMS": str(len(teams)),
        "teams-INITIAL_FORMS": str(len(teams)),
        "teams-MIN_NUM_FORMS": "0",
        "teams-MAX_NUM_FORMS": "5000",
        "action": "preview",
    }
    for i, team in enumerate(teams):
        gpu = {q.resource: q.guarantee for q in team.quotas.all()}.get(GPU)
        data |= {
            f"teams-{i}-weight": str(team.weight + (team.slug == "team-a")),
            f"teams-{i}-tier": str(team.tier_id or ""),
            f"teams-{i}-gpu": "" if gpu is None else str(int(gpu)),
            f"teams-{i}-cpu": "",
            f"teams-{i}-memory": "",
        }
    return data


def gpu_batch(w: World) -> dict:
    from django.utils import timezone

    sample = {
        "ts": timezone.now().isoformat(),
        "uuid": "GPU-9",
        "index": 0,
        "model": "NVIDIA H100 80GB HBM3",
        "util_gpu": 50,
    }
    return {"node": "gpu-001", "samples": [sample]}


LINES = [{"resource": GPU, "guarantee": "24", "limit": "48"}]
QUOTA_REQUEST = lambda w: {"team": "team-a", "justification": "x", "lines": LINES}  # noqa: E731
BUDGET = lambda w: {"team": "team-a", "resource": "cpu", "monthly_hours": "50"}  # noqa: E731
RATE = lambda w: {  # noqa: E731
    "resource": "cpu",
    "price_per_unit_hour": "0.05",
    "valid_from": "2030-01-01T00:00:00Z",
}

# ------------------------------------------------------------------ the table

# Column order: anon vic bob charlie alice dora root svc_cb svc_all agent
# A few recurring rows:
PAGE = "login ok ok ok ok ok ok login login login"  # any signed-in person
TEAM_A_PAGE = "login ok ok 404 ok ok ok login login login"  # team-a's people and admins
LEAD_FORM = "login 403 403 404 ok ok ok login login login"  # team-a's leads and admins
LEAD_POST = "login 403 403 404 3xx 3xx 3xx login login login"
ADMIN_PAGE = "login 403 403 403 403 403 ok login login login"
POST_ONLY = "login 405 405 405 405 405 405 login login login"  # GET on a POST-only page
PUBLIC = "ok ok ok ok ok ok ok ok ok ok"

API_LIST = "401 ok ok ok ok ok ok 403 ok 403"  # read:all, not read:chargeback
API_TEAM_A = "401 ok ok 404 ok ok ok 403 ok 403"  # a team-a row
API_CHARGEBACK = "401 ok ok ok ok ok ok ok ok 403"  # readable with read:chargeback too
API_TEAM_A_CB = "401 ok ok 404 ok ok ok ok ok 403"
API_ADMIN_WRITE = "401 403 403 403 403 403 ok 403 403 403"
API_ADMIN_405 = "401 403 403 403 403 403 405 403 403 403"  # method not offered; admins learn it
API_ADMIN_READ = "401 403 403 403 403 403 ok 403 ok 403"
API_NO_GET = "401 405 405 405 405 405 405 403 405 403"  # GET on a POST-only action

ROUTES: dict[str, Route] = {
    # ---- pages
    "home": r(GET=PAGE),
    "login": r(
        GET="ok 3xx 3xx 3xx 3xx 3xx 3xx ok ok ok",
        POST=("ok 3xx 3xx 3xx 3xx 3xx 3xx ok ok ok", lambda w: {"username": "x", "password": "y"}),
    ),
    "logout": r(GET="405 " * 9 + "405", POST=("login " * 9 + "login", None)),
    "healthz": r(GET=PUBLIC),
    "readyz": r(GET=PUBLIC),
    "favicon": r(GET="3xx " * 9 + "3xx"),  # a redirect to the static icon, for everyone
    "portal:metrics": r(GET="403 " * 9 + "403"),  # not loopback, no metrics token
    "api-schema": r(GET=PUBLIC),
    "api-docs": r(GET=PUBLIC),
    "portal:team": r(lambda w: {"slug": "team-a"}, GET=TEAM_A_PAGE),
    "portal:member_add": r(
        lambda w: {"slug": "team-a"},
        GET=POST_ONLY,
        POST=(LEAD_POST, lambda w: {"add-username": "nobody", "add-role": "viewer"}),
    ),
    "portal:member_update": r(
        lambda w: {"slug": "team-a", "membership_id": w.membership.pk},
        GET=POST_ONLY,
        POST=(LEAD_POST, lambda w: {f"m{w.membership.pk}-role": "viewer"}),
    ),
    # Cancelling a waiting transition: site admins only; outsiders cannot tell it exists.
    "portal:transition_cancel": r(
        lambda w: {"slug": "team-a", "transition_id": waiting_transition(w)},
        GET=POST_ONLY,
        POST=("login 403 403 404 403 403 3xx login login login", None),
    ),
    "portal:member_remove": r(
        lambda w: {"slug": "team-a", "membership_id": w.membership.pk},
        GET=POST_ONLY,
        POST=(LEAD_POST, None),
    ),
    "portal:quotarequest_create": r(
        lambda w: {"slug": "team-a"}, GET=LEAD_FORM, POST=(LEAD_POST, request_form)
    ),
    "portal:quotarequest_preview": r(
        lambda w: {"slug": "team-a"}, GET=POST_ONLY, POST=(LEAD_FORM, request_form)
    ),
    # Direct quota edits and their preview: site admins only.
    "portal:quota_edit": r(
        lambda w: {"slug": "team-a"},
        GET=ADMIN_PAGE,
        POST=("login 403 403 403 403 403 3xx login login login", quota_edit_form),
    ),
    "portal:quota_edit_preview": r(
        lambda w: {"slug": "team-a"}, GET=POST_ONLY, POST=(ADMIN_PAGE, quota_edit_form)
    ),
    # Ending a temporary grant: team-a's leads and admins (the world's request is pending, so
    # they are told it is no running grant and sent back to it).
    "portal:quotarequest_end": r(
        lambda w: {"pk": w.request.pk}, GET=POST_ONLY, POST=(LEAD_POST, None)
    ),
    # API tokens: every person manages their own (a new one redirects to the page showing its
    # secret once); admins every token.
    "portal:tokens": r(
        GET=PAGE, POST=("login 3xx 3xx 3xx 3xx 3xx 3xx login login login", token_form)
    ),
    "portal:token_revoke": r(
        lambda w: {"pk": w.personal_token.pk},
        shared=True,
        GET=POST_ONLY,
        POST=("login 404 404 404 3xx 404 3xx login login login", None),
    ),
    "portal:quotarequest_list": r(GET=PAGE),
    "portal:quotarequest": r(lambda w: {"pk": w.request.pk}, GET=TEAM_A_PAGE),
    "portal:quotarequest_withdraw": r(
        lambda w: {"pk": w.request.pk}, GET=POST_ONLY, POST=(LEAD_POST, None)
    ),
    "portal:approval_queue": r(GET=ADMIN_PAGE),
    "portal:approval_bulk_reject": r(
        GET=POST_ONLY,
        POST=(
            "login 403 403 403 403 403 3xx login login login",
            lambda w: {"bulk-requests": [w.request.pk], "bulk-note": "Not this quarter."},
        ),
    ),
    "portal:approval_preview": r(
        lambda w: {"pk": w.request.pk}, GET=ADMIN_PAGE, POST=(ADMIN_PAGE, decision_form)
    ),
    "portal:quotarequest_decide": r(
        lambda w: {"pk": w.request.pk},
        GET=POST_ONLY,
        POST=("login 403 403 403 403 403 3xx login login login", decision_form),
    ),
    "portal:rebalance": r(GET=ADMIN_PAGE, POST=(ADMIN_PAGE, rebalance_form)),
    # An invalid half-life: the admin gets the form back with its error (a valid one redirects).
    "portal:fairness": r(GET=ADMIN_PAGE, POST=(ADMIN_PAGE, lambda w: {"half_life": "bad"})),
    # Single sign-on (issue 33): off unless an issuer is configured (404 for everyone then);
    # the group page is the site admins'.
    "sso:start": r(GET="404 " * 9 + "404"),
    "sso:callback": r(GET="404 " * 9 + "404"),
    "sso:group_rules": r(
        GET=ADMIN_PAGE, POST=(ADMIN_PAGE, lambda w: {"pattern": "team-a-*", "action": "preview"})
    ),
    "sso:group_rule_delete": r(
        lambda w: {"pk": seeded_group_rule(w).pk},
        shared=True,
        GET=POST_ONLY,
        POST=("login 403 403 403 403 403 3xx login login login", None),
    ),
    "sso:cluster_group_delete": r(
        lambda w: {"pk": seeded_cluster_group(w).pk},
        shared=True,
        GET=POST_ONLY,
        POST=("login 403 403 403 403 403 3xx login login login", None),
    ),
    "portal:adopt_namespace": r(
        GET=ADMIN_PAGE, POST=(ADMIN_PAGE, lambda w: {"name": "legacy-ml", "team": "team-a"})
    ),
    # Sync runs: every signed-in person sees the runs, with only their teams' items
    # (tests/scheduling/test_views.py checks the items); only admins start one.
    "scheduling:syncrun_list": r(GET=PAGE),
    "scheduling:syncrun": r(lambda w: {"pk": w.sync_run.pk}, shared=True, GET=PAGE),
    "scheduling:syncrun_progress": r(lambda w: {"pk": w.sync_run.pk}, shared=True, GET=PAGE),
    "scheduling:sync_start": r(
        GET=POST_ONLY,
        POST=("login 403 403 403 403 403 3xx login login login", lambda w: {"mode": "dry-run"}),
    ),
    # Chargeback reports: everyone signed in, rows of their own teams only.
    "portal:reports": r(query={"month": "2025-05"}, GET=PAGE),
    "portal:reports_csv": r(query={"month": "2025-05"}, GET=PAGE),
    # ---- API: tenancy
    "quotas-api:team-list": r(
        GET=API_LIST,
        POST=(API_ADMIN_WRITE, lambda w: {"slug": "team-c", "name": "C", "parent": "dept-x"}),
    ),
    "quotas-api:team-detail": r(
        lambda w: {"slug": "team-a"},
        GET=API_TEAM_A,
        PATCH=(API_ADMIN_WRITE, lambda w: {"weight": 5}),
        PUT=(API_ADMIN_405, lambda w: {"slug": "team-a", "name": "A"}),
        DELETE=API_ADMIN_405,
    ),
    "quotas-api:namespace-list": r(
        GET=API_LIST,
        POST=(API_ADMIN_WRITE, lambda w: {"name": "team-a-dev", "team": "team-a"}),
    ),
    "quotas-api:namespace-detail": r(
        lambda w: {"pk": w.namespace.pk},
        GET=API_TEAM_A,
        PATCH=(API_ADMIN_WRITE, lambda w: {"labels": {"env": "dev"}}),
        PUT=(API_ADMIN_405, lambda w: {"name": "team-a-ml", "team": "team-a"}),
        DELETE=API_ADMIN_405,
    ),
    "quotas-api:membership-list": r(
        GET=API_LIST,
        # charlie cannot see team-a, so for him it reads like a typo: "No such team" (400).
        POST=(
            "401 403 403 400 ok ok ok 403 403 403",
            lambda w: {"team": "team-a", "user": "nobody", "role": "viewer"},
        ),
    ),
    "quotas-api:membership-detail": r(
        lambda w: {"pk": w.membership.pk},
        GET=API_TEAM_A,
        PATCH=("401 403 403 404 ok ok ok 403 403 403", lambda w: {"role": "viewer"}),
        PUT=("401 405 405 405 405 405 405 403 403 403", lambda w: {"role": "viewer"}),
        DELETE="401 403 403 404 ok ok ok 403 403 403",
    ),
    "quotas-api:teamquota-list": r(
        GET=API_LIST,
        POST=(
            API_ADMIN_WRITE,
            lambda w: {"team": "team-a", "resource": "cpu", "guarantee": "1", "limit": "2"},
        ),
    ),
    "quotas-api:teamquota-detail": r(
        lambda w: {"pk": w.quota.pk},
        GET=API_TEAM_A,
        PATCH=(API_ADMIN_WRITE, lambda w: {"guarantee": "21"}),
        PUT=(API_ADMIN_405, lambda w: {"team": "team-a", "resource": GPU, "guarantee": "1"}),
        DELETE=API_ADMIN_405,
    ),
    "quotas-api:prioritytier-list": r(
        GET=API_LIST,
        POST=(
            API_ADMIN_WRITE,
            lambda w: {"name": "prod", "value": 1000000, "preemption_policy": "Never"},
        ),
    ),
    "quotas-api:prioritytier-detail": r(
        lambda w: {"pk": w.cast.tier.pk},
        shared=True,
        GET=API_LIST,
        PATCH=(API_ADMIN_WRITE, lambda w: {"value": 200000}),
        PUT=(API_ADMIN_405, lambda w: {"name": "x", "value": 1}),
        DELETE=API_ADMIN_405,
    ),
    "quotas-api:quotarequest-list": r(
        GET=API_LIST, POST=("401 403 403 400 ok ok ok 403 403 403", QUOTA_REQUEST)
    ),
    "quotas-api:quotarequest-detail": r(lambda w: {"pk": w.request.pk}, GET=API_TEAM_A),
    "quotas-api:quotarequest-approve": r(
        lambda w: {"pk": w.request.pk},
        GET=API_NO_GET,
        POST=("401 403 403 404 403 403 ok 403 403 403", lambda w: {}),
    ),
    "quotas-api:quotarequest-reject": r(
        lambda w: {"pk": w.request.pk},
        GET=API_NO_GET,
        POST=("401 403 403 404 403 403 ok 403 403 403", lambda w: {"note": "No."}),
    ),
    "quotas-api:quotarequest-withdraw": r(
        lambda w: {"pk": w.request.pk},
        GET=API_NO_GET,
        POST=("401 403 403 404 ok ok ok 403 403 403", None),
    ),
    "quotas-api:budget-list": r(GET=API_CHARGEBACK, POST=(API_ADMIN_WRITE, BUDGET)),
    "quotas-api:budget-detail": r(
        lambda w: {"pk": w.budget.pk},
        GET=API_TEAM_A_CB,
        PATCH=(API_ADMIN_WRITE, lambda w: {"monthly_hours": "50"}),
        PUT=(API_ADMIN_WRITE, BUDGET),
        DELETE=API_ADMIN_WRITE,
    ),
    # Transitions: read like the team's other rows; only site admins cancel.
    "quotas-api:transition-list": r(GET=API_LIST),
    "quotas-api:transition-detail": r(lambda w: {"pk": waiting_transition(w)}, GET=API_TEAM_A),
    "quotas-api:transition-cancel": r(
        lambda w: {"pk": waiting_transition(w)},
        GET=API_NO_GET,
        POST=("401 403 403 404 403 403 ok 403 403 403", None),
    ),
    # The audit trail is for leads (of the team or its department) and admins.
    "quotas-api:auditevent-list": r(GET=API_LIST),
    "quotas-api:auditevent-detail": r(
        lambda w: {"pk": w.audit_event.pk}, GET="401 404 404 404 ok ok ok 403 ok 403"
    ),
    # ---- API: tokens (personal tokens: your own only; service/node tokens: admins). No
    # service or node-agent token reads any token, whatever its scopes.
    "quotas-api:token-list": r(
        GET="401 ok ok ok ok ok ok 403 403 403",
        POST=("401 ok ok ok ok ok ok 403 403 403", lambda w: {"name": "laptop"}),
    ),
    "quotas-api:token-detail": r(
        lambda w: {"pk": w.personal_token.pk},
        shared=True,
        GET="401 404 404 404 ok 404 404 403 403 403",
    ),
    "quotas-api:token-revoke": r(
        lambda w: {"pk": w.personal_token.pk},
        shared=True,
        GET="401 405 405 405 405 405 405 403 403 403",
        POST=("401 404 404 404 ok 404 404 403 403 403", None),
    ),
    "quotas-api:servicetoken-list": r(
        GET=API_ADMIN_WRITE,
        POST=(
            API_ADMIN_WRITE,
            lambda w: {"name": "finance", "kind": "service", "scopes": ["read:chargeback"]},
        ),
    ),
    "quotas-api:servicetoken-detail": r(
        lambda w: {"pk": w.service_token.pk}, shared=True, GET=API_ADMIN_WRITE
    ),
    "quotas-api:servicetoken-revoke": r(
        lambda w: {"pk": w.service_token.pk},
        shared=True,
        GET="401 403 403 403 403 403 405 403 403 403",
        POST=(API_ADMIN_WRITE, None),
    ),
    # Single sign-on (issue 33): group rules and cluster groups, site admins only (read:all
    # tokens read them, as they read sync runs).
    "quotas-api:grouprule-list": r(
        GET=API_ADMIN_READ,
        POST=(API_ADMIN_WRITE, lambda w: {"pattern": "ml-*", "team": "team-a", "role": "member"}),
    ),
    "quotas-api:grouprule-detail": r(
        lambda w: {"pk": seeded_group_rule(w).pk},
        shared=True,
        GET=API_ADMIN_READ,
        DELETE=(API_ADMIN_WRITE, None),
    ),
    "quotas-api:grouprule-matches": r(
        lambda w: {"pk": seeded_group_rule(w).pk}, shared=True, GET=API_ADMIN_READ
    ),
    "quotas-api:grouprule-preview": r(
        GET="401 403 403 403 403 403 405 403 405 403",
        POST=(API_ADMIN_WRITE, lambda w: {"pattern": "team-a-*"}),
    ),
    "quotas-api:teamclustergroup-list": r(
        GET=API_ADMIN_READ,
        POST=(API_ADMIN_WRITE, lambda w: {"team": "team-a", "group": "ml", "role": "member"}),
    ),
    "quotas-api:teamclustergroup-detail": r(
        lambda w: {"pk": seeded_cluster_group(w).pk},
        shared=True,
        GET=API_ADMIN_READ,
        DELETE=(API_ADMIN_WRITE, None),
    ),
    # ---- API: scheduling
    "scheduling-api:sharesnapshot-list": r(GET=API_LIST),
    "scheduling-api:sharesnapshot-current": r(GET=API_LIST),
    "scheduling-api:team-share-history": r(lambda w: {"slug": "team-a"}, GET=API_TEAM_A),
    "scheduling-api:sharesnapshot-detail": r(lambda w: {"pk": w.snapshot.pk}, GET=API_TEAM_A),
    "scheduling-api:syncrun-list": r(
        GET=API_ADMIN_READ, POST=(API_ADMIN_WRITE, lambda w: {"dry_run": True})
    ),
    "scheduling-api:syncrun-detail": r(
        lambda w: {"pk": w.sync_run.pk}, shared=True, GET=API_ADMIN_READ
    ),
    "scheduling-api:syncitem-list": r(GET=API_ADMIN_READ),
    "scheduling-api:syncitem-detail": r(
        lambda w: {"pk": w.sync_item.pk}, shared=True, GET=API_ADMIN_READ
    ),
    # ---- API: monitoring and chargeback
    "monitoring-api:chargeback": r(
        query={"start": "2025-05-01", "end": "2025-06-01"}, GET=API_CHARGEBACK
    ),
    "monitoring-api:usagesample-list": r(GET=API_LIST),
    "monitoring-api:usage-current": r(query={"team": "team-a"}, GET=API_TEAM_A),
    "monitoring-api:budget-use": r(query={"team": "team-a"}, GET=API_TEAM_A_CB),
    "monitoring-api:usagesample-detail": r(lambda w: {"pk": w.usage_sample.pk}, GET=API_TEAM_A),
    "monitoring-api:usagerollup-list": r(GET=API_CHARGEBACK),
    "monitoring-api:usagerollup-detail": r(lambda w: {"pk": w.rollup.pk}, GET=API_TEAM_A_CB),
    "monitoring-api:gpusample-list": r(GET=API_LIST),
    "monitoring-api:gpusample-detail": r(lambda w: {"pk": w.gpu_sample.pk}, GET=API_TEAM_A),
    # Node-agent tokens may do exactly one thing: post their own node's samples.
    "monitoring-api:gpusample-ingest": r(
        GET="401 403 403 403 403 403 403 403 403 403",
        POST=("401 403 403 403 403 403 403 403 403 ok", gpu_batch),
    ),
    "monitoring-api:workload-list": r(GET=API_LIST),
    "monitoring-api:workload-waits": r(query={"team": "team-a"}, GET=API_TEAM_A),
    "monitoring-api:capacitysnapshot-list": r(GET=API_LIST),
    "monitoring-api:capacitysnapshot-latest": r(GET=API_LIST),
    "monitoring-api:capacitysnapshot-detail": r(
        lambda w: {"pk": w.capacity.pk}, shared=True, GET=API_LIST
    ),
    "monitoring-api:ratecard-list": r(GET=API_CHARGEBACK, POST=(API_ADMIN_WRITE, RATE)),
    "monitoring-api:ratecard-detail": r(
        lambda w: {"pk": w.rate_card.pk},
        shared=True,
        GET=API_CHARGEBACK,
        PATCH=(API_ADMIN_WRITE, lambda w: {"price_per_unit_hour": "3"}),
        PUT=(API_ADMIN_WRITE, RATE),
        DELETE=API_ADMIN_WRITE,
    ),
    "monitoring-api:chargebackstatement-list": r(
        GET=API_CHARGEBACK, POST=(API_ADMIN_WRITE, lambda w: {"month": "2025-04"})
    ),
    # A statement is not a team's object: everyone with chargeback access opens it and sees
    # only the rows of their teams (tests/api/test_chargeback.py checks the rows).
    "monitoring-api:chargebackstatement-detail": r(
        lambda w: {"pk": w.statement.pk}, shared=True, GET=API_CHARGEBACK
    ),
}


# ------------------------------------------------------------------ walking the URLconf


def walk(resolver=None, namespace: str = "", prefix: str = "") -> Iterator[tuple]:
    """(name with namespaces, route string, pattern) of every URL pattern."""
    resolver = resolver or get_resolver()
    for pattern in resolver.url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            ns = namespace
            if pattern.namespace:
                ns = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            yield from walk(pattern, ns, route)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}" if namespace else (pattern.name or "")
            yield name, route, pattern


def routes_outside_admin() -> dict[str, tuple[str, URLPattern]]:
    return {
        name: (route, pattern) for name, route, pattern in walk() if not route.startswith("admin/")
    }


def drf_methods(pattern: URLPattern) -> set[str] | None:
    """The write methods a router route maps (None for views that are not viewsets)."""
    callback = pattern.callback
    actions = getattr(callback, "actions", None)
    if not actions or not issubclass(getattr(callback, "cls", object), ViewSetMixin):
        return None
    return {m.upper() for m in actions} - {"GET", "HEAD", "OPTIONS"}


def test_every_route_is_classified():
    found = routes_outside_admin()
    unclassified = sorted(set(found) - set(ROUTES))
    stale = sorted(set(ROUTES) - set(found))
    assert not unclassified, f"classify these routes in ROUTES: {unclassified}"
    assert not stale, f"these ROUTES rows match no URL pattern any more: {stale}"
    assert all(name for name in found), "every route needs a name to be classified"


@pytest.mark.parametrize("name", sorted(n for n, (_, p) in routes_outside_admin().items()))
def test_every_method_a_router_maps_is_classified(name):
    _route, pattern = routes_outside_admin()[name]
    mapped = drf_methods(pattern)
    declared = set(ROUTES[name].methods)
    assert "GET" in declared, f"{name}: classify GET too"
    if mapped is not None:
        missing = mapped - declared
        assert not missing, f"{name}: classify {sorted(missing)}"


# ------------------------------------------------------------------ the matrix


def outcome(response: HttpResponse) -> str:
    if 200 <= response.status_code < 300:
        return "ok"
    if 300 <= response.status_code < 400:
        location = response.get("Location", "")
        return "login" if location.startswith(reverse("login")) else "3xx"
    return str(response.status_code)


def is_api(name: str) -> bool:
    return name.split(":")[0].endswith("-api")


def call(world: World, role: str, name: str, method: str, kwargs: dict) -> HttpResponse:
    route = ROUTES[name]
    _expected, body = route.methods[method]
    url = reverse(name, kwargs=kwargs)
    client = client_for(world, role)
    data = body(world) if body else None
    if method == "GET":
        return client.get(url, route.query)
    if is_api(name):
        payload = json.dumps(data if data is not None else {})
        return client.generic(method, url, payload, content_type="application/json")
    return client.generic(
        method,
        url,
        _urlencode(data or {}),
        content_type="application/x-www-form-urlencoded",
    )


def _urlencode(data: dict) -> str:
    from urllib.parse import urlencode

    return urlencode(data)


def run_roles(world: World, name: str, method: str, kwargs: dict) -> dict[str, str]:
    """Each role's outcome, each in a rolled-back savepoint with fresh throttle counters."""
    got = {}
    for role in ROLES:
        cache.clear()
        with transaction.atomic():
            response = call(world, role, name, method, kwargs)
            assert response.status_code < 500, (name, method, role, response.content[:500])
            got[role] = outcome(response)
            transaction.set_rollback(True)
    return got


CASES = [(name, method) for name, route in sorted(ROUTES.items()) for method in route.methods]


@pytest.mark.parametrize(("name", "method"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_each_role_gets_the_documented_answer(world, name, method):
    route = ROUTES[name]
    expected = dict(zip(ROLES, route.methods[method][0].split(), strict=True))

    got = run_roles(world, name, method, route.kwargs(world) if route.kwargs else {})

    wrong = {role: f"expected {expected[role]}, got {got[role]}" for role in ROLES}
    wrong = {role: text for role, text in wrong.items() if expected[role] != got[role]}
    assert not wrong, f"{method} {name}: {wrong}"


def _missing(kwargs: dict) -> dict:
    return {k: ("no-such-team" if k == "slug" else 999_999) for k in kwargs}


OBJECT_CASES = [(n, m) for n, m in CASES if ROUTES[n].kwargs and not ROUTES[n].shared]


@pytest.mark.parametrize(
    ("name", "method"), OBJECT_CASES, ids=[f"{n}-{m}" for n, m in OBJECT_CASES]
)
def test_outsiders_cannot_tell_a_team_a_object_from_a_missing_one(world, name, method):
    kwargs = ROUTES[name].kwargs(world)
    with transaction.atomic():
        real = outcome(call(world, "charlie", name, method, kwargs))
        transaction.set_rollback(True)
    cache.clear()
    with transaction.atomic():
        missing = outcome(call(world, "charlie", name, method, _missing(kwargs)))
        transaction.set_rollback(True)
    assert real == missing, f"{method} {name}: team-a's object {real}, a missing one {missing}"


# ------------------------------------------------------------------ the Django admin


@pytest.mark.parametrize(
    ("role", "expected"),
    [("anon", "admin-login"), ("bob", "admin-login"), ("alice", "admin-login"), ("root", "ok")],
)
def test_the_django_admin_is_for_site_admins_only(world, role, expected):
    client = client_for(world, role)
    for url in ("/admin/", "/admin/quotas/team/", f"/admin/quotas/team/{world.cast.team_a.pk}/"):
        response = client.get(url)
        if expected == "ok":
            assert response.status_code in (200, 302), url
            if response.status_code == 302:  # e.g. change → view redirect inside the admin
                assert "/admin/login/" not in response["Location"], url
        else:
            assert response.status_code == 302, url
            assert response["Location"].startswith("/admin/login/"), url
