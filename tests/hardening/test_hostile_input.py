"""Hostile input: CSRF on every form, oversized bodies, absurd quantities, markup in names and
justifications, spreadsheet formulas in CSV cells, password guessing, tokens in logs, and node
agents reporting for someone else's node. The answer is always a 4xx or a form error — never a
500 — and nothing is written."""

from __future__ import annotations

import csv
import io
import json
import logging
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from monitoring.models import GpuSample, RateCard, UsageRollup
from quotas import decisions, lines
from quotas.models import AuditEvent, Budget, QuotaRequest, Team, TeamQuota
from quotas.signals import quota_changed
from tests.base import GPU, PASSWORD
from tests.hardening.conftest import client_for
from tests.hardening.test_authorization_matrix import ROUTES, is_api, request_form

pytestmark = pytest.mark.django_db

HUGE = "1" + "0" * 30  # 10^30 GPUs
BAD_QUANTITIES = [
    "1e400",
    "-1",
    "NaN",
    "Infinity",
    "-Infinity",
    "sNaN",
    HUGE,
    "10^30",
    "1e999999999Ki",  # overflows Decimal's context when the suffix is applied
    "٣٠",  # Arabic-Indic digits: Decimal() reads 30, Kubernetes does not
    "３０",  # fullwidth digits
    "1_000",  # Python's digit grouping, not Kubernetes grammar
    "",
    " ",
    "x" * 70,
]


@pytest.fixture(autouse=True)
def _no_share_or_sync_tasks():
    """Writes here must not reach the broker (tests/hardening/test_faults.py does that)."""
    from scheduling import receivers

    uid = "scheduling.sync_on_quota"
    quota_changed.disconnect(dispatch_uid=uid)
    yield
    quota_changed.connect(receivers.on_quota_changed, dispatch_uid=uid)


def snapshot_of_writes() -> tuple:
    return (
        QuotaRequest.objects.count(),
        list(TeamQuota.objects.order_by("pk").values_list("guarantee", "limit")),
        RateCard.objects.count(),
        Budget.objects.count(),
        AuditEvent.objects.count(),
    )


def assert_client_error(response, *, allowed=(400,)) -> None:
    assert response.status_code in allowed, (response.status_code, response.content[:300])


# ------------------------------------------------------------------ CSRF

UI_FORMS = sorted(
    name for name, route in ROUTES.items() if not is_api(name) and "POST" in route.methods
)


def _login_csrf_client(world, role) -> Client:
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="203.0.113.7")
    if role != "anon":
        client.force_login(getattr(world.cast, role))
    return client


@pytest.mark.parametrize("name", UI_FORMS)
def test_every_ui_form_refuses_a_post_without_the_csrf_token(world, name):
    route = ROUTES[name]
    _expected, body = route.methods["POST"]
    url = reverse(name, kwargs=route.kwargs(world) if route.kwargs else {})
    data = body(world) if body else {}
    role = "anon" if name == "login" else "root"
    before = snapshot_of_writes()

    refused = _login_csrf_client(world, role).post(url, data)

    assert refused.status_code == 403, name
    assert b"CSRF" in refused.content
    assert snapshot_of_writes() == before
    # The same post with the token goes through the checks (so the 403 was the CSRF check).
    client = _login_csrf_client(world, role)
    client.get(reverse("login") if role == "anon" else reverse("home"))
    token = client.cookies["csrftoken"].value
    accepted = client.post(url, data | {"csrfmiddlewaretoken": token})
    assert accepted.status_code != 403, name


def test_the_api_refuses_session_writes_without_csrf_but_not_bearer_writes(world):
    url = reverse("quotas-api:quotarequest-list")
    payload = json.dumps(
        {
            "team": "team-a",
            "justification": "x",
            "lines": [{"resource": GPU, "guarantee": "24", "limit": "48"}],
        }
    )
    session = _login_csrf_client(world, "alice")
    response = session.post(url, payload, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in json.dumps(response.json())
    assert QuotaRequest.objects.count() == 1  # the world's one

    # A bearer token is not ambient authority: no CSRF token needed.
    from quotas.tokens import issue_token

    raw = issue_token(owner=world.cast.alice, name="cli").raw
    bearer = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert bearer.post(url, payload, content_type="application/json").status_code == 201


# ------------------------------------------------------------------ oversized bodies


def test_an_oversized_ui_form_is_refused_with_400(world):
    client = client_for(world, "alice")
    padding = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024)
    before = snapshot_of_writes()

    response = client.post(
        reverse("portal:quotarequest_create", args=["team-a"]),
        request_form(world) | {"justification": padding},
    )

    assert_client_error(response)
    assert snapshot_of_writes() == before


def test_a_form_with_too_many_fields_is_refused_with_400(world):
    client = client_for(world, "alice")
    data = request_form(world) | {f"junk-{i}": "1" for i in range(5000)}

    response = client.post(reverse("portal:quotarequest_create", args=["team-a"]), data)

    assert_client_error(response)


def test_a_formset_claiming_a_million_rows_is_a_form_error(world):
    client = client_for(world, "alice")
    data = request_form(world) | {"lines-TOTAL_FORMS": "1000000"}

    response = client.post(reverse("portal:quotarequest_create", args=["team-a"]), data)

    assert response.status_code == 200
    assert QuotaRequest.objects.count() == 1


@pytest.mark.parametrize(
    "name",
    [
        "quotas-api:quotarequest-list",
        "quotas-api:teamquota-list",
        "monitoring-api:ratecard-list",
        "monitoring-api:gpusample-ingest",
    ],
)
def test_an_oversized_api_body_is_refused_before_it_is_parsed(world, name):
    role = "agent" if name.endswith("ingest") else ("alice" if "quotarequest" in name else "root")
    body = ROUTES[name].methods["POST"][1](world)
    # Valid JSON, valid content — only too big: whitespace padding after the object.
    payload = json.dumps(body) + " " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024)
    before = (snapshot_of_writes(), GpuSample.objects.count())

    response = client_for(world, role).post(reverse(name), payload, content_type="application/json")

    assert response.status_code in (400, 413), (response.status_code, response.content[:300])
    assert (snapshot_of_writes(), GpuSample.objects.count()) == before


# ------------------------------------------------------------------ absurd quantities


@pytest.mark.parametrize("value", BAD_QUANTITIES)
def test_the_ui_request_form_shows_an_error_for_an_absurd_quantity(world, value):
    client = client_for(world, "alice")
    before = snapshot_of_writes()

    response = client.post(
        reverse("portal:quotarequest_create", args=["team-a"]),
        request_form(world) | {"lines-0-guarantee": value},
    )

    assert response.status_code == 200
    assert response.context["formset"].forms[0].errors, value
    assert snapshot_of_writes() == before


@pytest.mark.parametrize("value", BAD_QUANTITIES)
def test_the_ui_preview_and_decision_forms_reject_an_absurd_quantity(world, value):
    client = client_for(world, "root")
    prefix = f"r{world.request.pk}"
    before = snapshot_of_writes()

    preview = client.post(
        reverse("portal:quotarequest_preview", args=["team-a"]),
        request_form(world) | {"lines-0-limit": value},
    )
    decide = client.post(
        reverse("portal:quotarequest_decide", args=[world.request.pk]),
        {"decision": "approve", f"{prefix}-line0_guarantee": value, f"{prefix}-line0_limit": "48"},
    )

    assert preview.status_code == 200 and b"Fix the highlighted amounts" in preview.content
    assert decide.status_code == 200 and decide.context["decision_form"].errors
    assert snapshot_of_writes() == before


# Plain decimals (budget hours, prices) are read by Python's Decimal, which also takes other
# scripts' digits and "_" grouping; that is a faithful reading ("٣٠" is 30), not an accident, so
# there either a 400 or exactly the intended number is right. Kubernetes quantities are not.
FAITHFUL = {"٣٠": "30", "３０": "30", "1_000": "1000"}


def _api_cases(world, value) -> list[tuple[str, str, str, object, str | None]]:
    """(role, method, url, JSON body, field of a plain decimal or None) placing ``value`` in
    every quantity and amount the API accepts."""
    lines = [{"resource": GPU, "guarantee": value, "limit": "48"}]
    return [
        (
            "alice",
            "POST",
            reverse("quotas-api:quotarequest-list"),
            {"team": "team-a", "justification": "x", "lines": lines},
            None,
        ),
        (
            "root",
            "POST",
            reverse("quotas-api:quotarequest-approve", args=[world.request.pk]),
            {"adjustments": {GPU: {"guarantee": value, "limit": "48"}}},
            None,
        ),
        (
            "root",
            "POST",
            reverse("quotas-api:teamquota-list"),
            {"team": "team-a", "resource": "cpu", "guarantee": value, "limit": "2"},
            None,
        ),
        (
            "root",
            "PATCH",
            reverse("quotas-api:teamquota-detail", args=[world.quota.pk]),
            {"limit": value},
            None,
        ),
        (
            "root",
            "POST",
            reverse("quotas-api:budget-list"),
            {"team": "team-a", "resource": "cpu", "monthly_hours": value},
            "monthly_hours",
        ),
        (
            "root",
            "POST",
            reverse("monitoring-api:ratecard-list"),
            {"resource": "cpu", "price_per_unit_hour": value, "valid_from": "2030-01-01"},
            "price_per_unit_hour",
        ),
    ]


@pytest.mark.parametrize("value", BAD_QUANTITIES)
def test_the_api_answers_400_to_an_absurd_quantity_everywhere(world, value):
    before = snapshot_of_writes()
    accepted = False
    for role, method, url, body, decimal_field in _api_cases(world, value):
        response = client_for(world, role).generic(
            method, url, json.dumps(body), content_type="application/json"
        )
        if decimal_field and value in FAITHFUL and response.status_code == 201:
            assert Decimal(response.json()[decimal_field]) == Decimal(FAITHFUL[value])
            accepted = True
            continue
        assert response.status_code == 400, (url, value, response.status_code, response.content)
        assert "errors" in response.json()
    if not accepted:
        assert snapshot_of_writes() == before
    assert TeamQuota.objects.filter(resource="cpu").count() == 0
    assert QuotaRequest.objects.count() == 1


@pytest.mark.parametrize("value", [1e400, -1e400, 10**30, -1, 1e308])
def test_the_api_answers_400_to_absurd_json_numbers(world, value):
    # json.dumps writes 1e400 as Infinity, which the API's strict JSON parser refuses outright;
    # the raw "1e400" literal is a valid JSON number that Python reads as inf.
    text = "1e400" if value == 1e400 else ("-1e400" if value == -1e400 else json.dumps(value))
    body = (
        '{"team": "team-a", "justification": "x", "lines": [{"resource": "nvidia.com/gpu", '
        f'"guarantee": {text}, "limit": 48}}]}}'
    )
    response = client_for(world, "alice").post(
        reverse("quotas-api:quotarequest-list"), body, content_type="application/json"
    )
    assert response.status_code == 400, (value, response.content)
    assert QuotaRequest.objects.count() == 1


@pytest.mark.parametrize(
    "params",
    [
        {"start": "1e400", "end": "2025-06-01"},
        {"start": "NaN", "end": "Infinity"},
        {"start": "2025-05-01", "end": HUGE},
        {"start": "-1", "end": "2025-06-01"},
        {"start": "2025-05-01", "end": "9999-12-31T23:59:59+14:00"},
        {"start": "0001-01-01", "end": "0001-01-02T00:00:00-14:00"},
        {"start": "2025-05-01", "end": "2025-06-01", "group_by": "team,team"},
        {"start": "2025-05-01", "end": "2025-06-01", "group_by": "password"},
        {"start": "2025-05-01", "end": "2025-06-01", "group_by": "x" * 10000},
        {"start": "2025-05-01\x00", "end": "2025-06-01"},
    ],
)
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_chargeback_parameters_are_validated_not_crashed_on(world, params, fmt):
    api = client_for(world, "root").get(
        reverse("monitoring-api:chargeback"), params | {"format": fmt}
    )
    page = client_for(world, "root").get(
        reverse("portal:reports_csv" if fmt == "csv" else "portal:reports"),
        {"start": params["start"], "end": params["end"], "group_by": params.get("group_by", "")},
    )

    assert api.status_code == 400, (params, api.content[:300])
    assert page.status_code in (200, 400), (params, page.status_code)
    if fmt == "json" and page.status_code == 200:  # NUL is refused before the view (400)
        assert page.context["form"].errors, params


# ------------------------------------------------------------------ markup is escaped

SCRIPT = "<script>alert('x')</script>"
IMG = '"><img src=x onerror=alert(1)>'


def _hostile_world(world):
    cast = world.cast
    Team.objects.filter(pk=cast.team_a.pk).update(name=SCRIPT, cost_center=IMG)
    req = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "30", "50")],
        justification=f"{IMG} {SCRIPT}",
    )
    rejected = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[lines.LineInput(GPU, "22", "44")],
        justification="second",
    )
    decisions.reject_request(rejected.pk, approver=cast.root, note=f"No: {SCRIPT}")
    UsageRollup.objects.create(
        period="day",
        start=datetime(2025, 5, 2, tzinfo=UTC),
        team=cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        flavor=IMG,
        allocated_hours=Decimal(5),
    )
    return req, rejected


def test_names_justifications_and_notes_are_escaped_on_every_page(world):
    req, rejected = _hostile_world(world)
    pages = [
        reverse("home"),
        reverse("portal:team", args=["team-a"]),
        reverse("portal:quotarequest_list"),
        reverse("portal:quotarequest", args=[req.pk]),
        reverse("portal:quotarequest", args=[rejected.pk]),
        reverse("portal:quotarequest_create", args=["team-a"]),
        reverse("portal:approval_queue"),
        reverse("portal:approval_preview", args=[req.pk]),
        reverse("portal:rebalance"),
        reverse("scheduling:syncrun_list"),
        reverse("scheduling:syncrun", args=[world.sync_run.pk]) + "?show=all",
        reverse("portal:reports") + "?month=2025-05&group_by=team&group_by=cost_center",
        reverse("portal:reports") + "?month=2025-05&group_by=flavor",
    ]
    for role in ("root", "alice"):
        client = client_for(world, role)
        for url in pages:
            response = client.get(url)
            if response.status_code == 403:
                continue  # admin pages, for alice
            text = response.content.decode()
            assert response.status_code == 200, url
            assert "<script>alert" not in text, (role, url)
            assert "<img src=x" not in text, (role, url)
    text = client_for(world, "root").get(reverse("home")).content.decode()
    assert "&lt;script&gt;alert(" in text
    text = client_for(world, "root").get(reverse("portal:approval_queue")).content.decode()
    assert "&lt;img src=x" in text
    text = client_for(world, "alice").get(reverse("portal:quotarequest", args=[rejected.pk]))
    assert "No: &lt;script&gt;" in text.content.decode()


def test_the_api_returns_markup_as_data(world):
    _hostile_world(world)
    response = client_for(world, "root").get(reverse("quotas-api:team-detail", args=["team-a"]))
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["name"] == SCRIPT
    assert response["X-Content-Type-Options"] == "nosniff"


# ------------------------------------------------------------------ CSV formula injection

FORMULAS = ['=HYPERLINK("http://evil")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1"]


@pytest.mark.parametrize("formula", FORMULAS)
def test_chargeback_csv_cells_never_start_a_formula(world, formula):
    Team.objects.filter(pk=world.cast.team_a.pk).update(cost_center=formula)
    UsageRollup.objects.create(
        period="day",
        start=datetime(2025, 5, 3, tzinfo=UTC),
        team=world.cast.team_a,
        namespace="team-a-ml",
        resource=GPU,
        flavor=formula,
        allocated_hours=Decimal(5),
    )
    client = client_for(world, "root")
    api = client.get(
        reverse("monitoring-api:chargeback"),
        {
            "start": "2025-05-01",
            "end": "2025-06-01",
            "group_by": "cost_center,flavor",
            "format": "csv",
        },
    )
    page = client.get(
        reverse("portal:reports_csv"),
        {"month": "2025-05", "group_by": ["cost_center", "flavor"]},
    )
    for response in (api, page):
        assert response.status_code == 200
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        cells = [row[k] for row in rows for k in ("cost_center", "flavor")]
        assert f"'{formula}" in cells
        for row in rows:
            for value in row.values():
                assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value


# ------------------------------------------------------------------ login throttling


def _login(client, username, password):
    return client.post(reverse("login"), {"username": username, "password": password})


def test_guessing_passwords_for_many_users_from_one_address_is_throttled(world, settings):
    settings.FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    cache.clear()
    attacker = Client(REMOTE_ADDR="198.51.100.9")
    for name in ("alice", "bob", "vic", "charlie", "no-such-user"):
        assert _login(attacker, name, "wrong").status_code == 200
    response = _login(attacker, "dora", PASSWORD)  # right password, but throttled
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in attacker.session
    # Someone else, from elsewhere, signs in normally.
    assert _login(Client(REMOTE_ADDR="198.51.100.10"), "root", PASSWORD).status_code == 302


def test_a_throttled_unknown_user_reads_like_a_throttled_real_one(world):
    cache.clear()
    for name in ("alice", "ghost"):
        client = Client(REMOTE_ADDR=f"198.51.100.{20 + len(name)}")
        for _ in range(6):
            response = _login(client, name, "wrong")
        assert "Too many failed sign-ins" in response.content.decode(), name


def test_a_huge_username_or_password_is_a_form_error(world):
    cache.clear()
    client = Client(REMOTE_ADDR="198.51.100.30")
    assert _login(client, "a" * 100_000, "b").status_code == 200
    assert _login(client, "alice", "b" * 100_000).status_code == 200


# ------------------------------------------------------------------ tokens stay out of logs


def test_bearer_tokens_never_reach_the_logs(world, caplog, capfd):
    good = world.raw_tokens["svc_all"]
    bad = good[:-6] + "ZZZZZZ"
    with caplog.at_level(logging.DEBUG):
        ok = Client(HTTP_AUTHORIZATION=f"Bearer {good}").get(reverse("quotas-api:team-list"))
        refused = Client(HTTP_AUTHORIZATION=f"Bearer {bad}").get(reverse("quotas-api:team-list"))
        odd = Client(HTTP_AUTHORIZATION=f"Bearer {good} extra").get(reverse("quotas-api:team-list"))
        logging.getLogger("django.request").warning("Unauthorized: %s", f"Bearer {bad}")
    assert (ok.status_code, refused.status_code, odd.status_code) == (200, 401, 401)
    secrets = (good.split("_", 2)[2], bad.split("_", 2)[2])
    # What leaves the process (the console handler, with its redaction filter) has no secret...
    out, err = capfd.readouterr()
    for secret in secrets:
        assert secret not in out + err
    # ...and neither has any record the app itself wrote (only the deliberate one above does).
    for record in caplog.records:
        if record.name == "django.request" and record.args and "Bearer" in str(record.args):
            continue
        text = record.getMessage() + json.dumps(getattr(record, "__dict__", {}), default=str)
        for secret in secrets:
            assert secret not in text, record.name


# ------------------------------------------------------------------ GPU ingest


def _sample(**extra) -> dict:
    from django.utils import timezone

    ts = (timezone.now() - timezone.timedelta(seconds=30)).isoformat()
    return {"ts": ts, "uuid": "GPU-7", "index": 0, "model": "NVIDIA H100 80GB HBM3", **extra}


@pytest.mark.parametrize(
    "batch",
    [
        {"node": "gpu-002", "samples": [_sample()]},
        {"node": "gpu-001", "samples": [_sample(node="gpu-002")]},
        {"node": "gpu-001", "samples": [_sample(), _sample(uuid="GPU-8", node="gpu-002")]},
        {"node": "", "samples": [_sample()]},
        {"node": ["gpu-001"], "samples": [_sample()]},
        {"samples": [_sample()]},
    ],
)
def test_a_node_agent_cannot_post_samples_for_another_node(world, batch):
    response = client_for(world, "agent").post(
        reverse("monitoring-api:gpusample-ingest"), batch, content_type="application/json"
    )
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["node"]
    assert GpuSample.objects.count() == 1  # the world's one


@pytest.mark.parametrize(
    "sample",
    [
        _sample(util_gpu="NaN"),
        _sample(util_gpu=1e308),
        _sample(util_gpu=-5),
        _sample(mem_used=10**40),
        _sample(index=10**9),
        _sample(ts="not a time"),
        _sample(ts="2025-05-01T12:00:00"),
        _sample(ts="9999-12-31T23:59:59+00:00"),
        _sample(uuid="u" * 1000),
        _sample(model=["x"]),
        _sample(processes="lots"),
        _sample(processes=[{"namespace": {"x": 1}, "pod": None}]),
        "not an object",
    ],
)
def test_malformed_samples_are_rejected_one_by_one(world, sample):
    response = client_for(world, "agent").post(
        reverse("monitoring-api:gpusample-ingest"),
        {"node": "gpu-001", "samples": [sample, _sample(uuid="GPU-OK")]},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] + len(body["rejected_reasons"]) == 2
    assert GpuSample.objects.filter(uuid="GPU-OK").count() == 1


@pytest.mark.parametrize(
    "raw",
    ['{"node": "gpu-001", "samples": [', "[]", '"x"', "null", '{"node": "gpu-001", "samples": 5}'],
)
def test_a_malformed_batch_is_400(world, raw):
    response = client_for(world, "agent").post(
        reverse("monitoring-api:gpusample-ingest"), raw, content_type="application/json"
    )
    assert response.status_code == 400, response.content
