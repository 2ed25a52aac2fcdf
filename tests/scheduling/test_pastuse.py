"""Fairness over time (issue 32): decayed past use in the fair shares.

The pure formula (scheduling.domain.pastuse) against the numbers of its sources (KAI-Scheduler's
time-based fairshare docs and proportion plugin, Slurm's Fair Tree as sshare prints it), its
properties for random groups, and the whole path against the database: hourly rollups → folded
state → weights → allocations, including the issue's "Done when" (direction and size, halving
every half-life, off = today's allocations exactly)."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring.models import CapacitySnapshot, UsageRollup, UsageSample
from quotas.models import AuditEvent, Team
from scheduling import pastuse as pastuse_io
from scheduling.domain import pastuse
from scheduling.models import PastUsageState, ShareSnapshot
from scheduling.services import compute_shares

DAY = 86400.0
WEEK = 7 * DAY
NOW = timezone.now().replace(minute=0, second=0, microsecond=0)


# --------------------------------------------------------------------------- the sources


def test_a_resource_hour_one_half_life_ago_counts_half():
    # KAI docs/time-based-fairshare/README.md: "for a half life of one hour, a usage (for
    # example, 1 gpu-second) that occurred an hour ago will be considered half as significant".
    assert pastuse.decay(3600, 3600) == 0.5
    assert pastuse.decay(2 * 3600, 3600) == 0.25
    assert pastuse.decay(0, 3600) == 1.0


def test_usage_is_normalised_to_the_capacity_of_the_period_as_kai_does():
    # KAI README "Normalization to cluster capacity": 10 GPUs, 10 hours, 24 GPU-hours → 0.24.
    share, resource = pastuse.dominant_past_share(
        {"nvidia.com/gpu": 24.0}, {"nvidia.com/gpu": 100.0}
    )
    assert (round(share, 6), resource) == (0.24, "nvidia.com/gpu")


def _kai_share_weights(weights, usage, k):
    """KAI's proportion plugin, resource_division.go calcShareWeights, one round, normalised:
    P_i = max(0, W_i + k·(W_i − U_i)) / Σ P."""
    total = sum(weights)
    raw = [max(0.0, w / total + k * (w / total - u)) for w, u in zip(weights, usage, strict=True)]
    return [p / sum(raw) for p in raw]


def test_more_past_use_means_less_weight_in_the_same_order_as_kai():
    # KAI's simulator example (cmd/time-based-fairshare-simulator/examples/example_config.yaml):
    # two equal queues under one department, no deserved quota, kValue 1.
    weights, usage = [1.0, 1.0], [0.4, 0.1]
    kai = _kai_share_weights(weights, usage, 1.0)
    ours = pastuse.adjust_weights([("a", "d", 1.0), ("b", "d", 1.0)], {"a": 0.4, "b": 0.1}, 0.9)
    assert kai[0] < 0.5 < kai[1]
    assert ours["a"].effective_weight < 1.0 < ours["b"].effective_weight
    # No past use at all: KAI's weights and ours are the plain ones.
    assert _kai_share_weights(weights, [0.0, 0.0], 1.0) == [0.5, 0.5]
    plain = pastuse.adjust_weights([("a", "d", 1.0), ("b", "d", 1.0)], {}, 0.9)
    assert [a.multiplier for a in plain.values()] == [1.0, 1.0]


def test_the_order_of_teams_is_slurm_fair_trees_level_fairshare_order():
    # Slurm Fair Tree ranks siblings by Level FS = normalised shares / effective usage
    # (sshare output of an account with 23 equal users, one week half-life): eroche 344,
    # qubit 351, rezzonic 681 raw usage; the others 0 (Level FS inf).
    users = {"eroche": 344, "qubit": 351, "rezzonic": 681, "aubort": 0, "topf": 0}
    siblings = 23
    norm_share = 1 / siblings
    effective = {u: raw / 1376 for u, raw in users.items()}
    level_fs = {u: (norm_share / e if e else math.inf) for u, e in effective.items()}
    assert (
        round(level_fs["eroche"], 6) == round(0.043478 / 0.25, 6)
        or abs(level_fs["eroche"] - 0.173913) < 1e-4
    )
    assert abs(level_fs["rezzonic"] - 0.087848) < 2e-4
    # The same group here: usage as fractions of the cluster (the account held 1376 units of a
    # cluster of 10,000), equal weights.
    past = {u: raw / 10000 for u, raw in users.items()}
    tenants = [(u, "acct", 1.0) for u in users] + [
        (f"idle{i}", "acct", 1.0) for i in range(siblings - len(users))
    ]
    adjusted = pastuse.adjust_weights(tenants, past, 0.5)
    by_slurm = sorted(users, key=lambda u: (-level_fs[u], u))
    by_ours = sorted(users, key=lambda u: (-adjusted[u].multiplier, u))
    assert by_ours == by_slurm


# --------------------------------------------------------------------------- properties


groups = st.lists(
    st.tuples(st.integers(1, 20), st.floats(0, 0.5, allow_nan=False)), min_size=1, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(groups, st.floats(0, pastuse.MAX_STRENGTH))
def test_weights_are_bounded_by_the_strength_and_the_unused_never_lose(group, strength):
    tenants = [(f"t{i}", None, float(w)) for i, (w, _) in enumerate(group)]
    past = {f"t{i}": u for i, (_, u) in enumerate(group)}
    adjusted = pastuse.adjust_weights(tenants, past, strength)
    total = sum(a.weight for a in adjusted.values())
    effective_total = sum(a.effective_weight for a in adjusted.values())
    for name, a in adjusted.items():
        assert 1 - strength - 1e-12 <= a.multiplier <= 1 + strength + 1e-12
        normalised = a.effective_weight / effective_total
        plain = a.weight / total
        assert plain * (1 - strength) / (1 + strength) - 1e-12 <= normalised
        assert normalised <= plain * (1 + strength) / (1 - strength) + 1e-12
        if past[name] == 0:  # used nothing: never below its weighted share
            assert normalised >= plain - 1e-12
    if not any(a.clamped for a in adjusted.values()):
        # Unclamped, Σ W_i·m_i = 1: no renormalisation, shares move linearly with past use.
        assert abs(sum(a.group_share * a.multiplier for a in adjusted.values()) - 1) < 1e-9


@settings(max_examples=200, deadline=None)
@given(groups, st.floats(0.01, pastuse.MAX_STRENGTH), st.floats(0.01, 1))
def test_as_past_use_decays_the_weights_return_to_their_own(group, strength, factor):
    tenants = [(f"t{i}", None, float(w)) for i, (w, _) in enumerate(group)]
    past = {f"t{i}": u for i, (_, u) in enumerate(group)}
    now = pastuse.adjust_weights(tenants, past, strength)
    later = pastuse.adjust_weights(tenants, {k: v * factor for k, v in past.items()}, strength)
    for name in now:
        assert abs(later[name].multiplier - 1) <= abs(now[name].multiplier - 1) + 1e-12
    gone = pastuse.adjust_weights(tenants, {k: 0.0 for k in past}, strength)
    assert all(a.multiplier == 1.0 for a in gone.values())


def test_zero_strength_is_off_and_bad_strengths_are_refused():
    adjusted = pastuse.adjust_weights([("a", None, 2), ("b", None, 1)], {"a": 0.9}, 0.0)
    assert [a.multiplier for a in adjusted.values()] == [1.0, 1.0]
    with pytest.raises(ValueError, match="strength"):
        pastuse.adjust_weights([("a", None, 1)], {}, 0.95)


# --------------------------------------------------------------------------- against the DB


def _cluster(cpu=1000, *, since_days=60):
    CapacitySnapshot.objects.create(
        taken_at=NOW - timedelta(days=since_days), source="test", resources={"cpu": str(cpu)}
    )


def _teams_wanting_everything(cpu=1000):
    a = Team.objects.create(slug="heavy", name="Heavy")
    b = Team.objects.create(slug="light", name="Light")
    for team in (a, b):
        UsageSample.objects.create(
            taken_at=NOW,
            team=team,
            namespace=team.slug,
            resource="cpu",
            allocated=Decimal(0),
            pending=Decimal(cpu),
        )
    return a, b


def _used(team, *, cpu, hours, ending):
    """``team`` held ``cpu`` cores every hour of the ``hours`` hours before ``ending``."""
    UsageRollup.objects.bulk_create(
        UsageRollup(
            period="hour",
            start=ending - timedelta(hours=h + 1),
            team=team,
            namespace=team.slug,
            resource="cpu",
            allocated_hours=Decimal(cpu),
        )
        for h in range(hours)
    )


def _expected_share(*, used_hours, used_end_age_h, history_h, half_life_h):
    """Σ over the used hours of 2^(-age/H) / Σ over the history of 2^(-age/H) (ages of hour
    ends from the fold's ``through``); the team held the whole cluster in its hours."""
    w = [0.5 ** (age / half_life_h) for age in range(history_h)]
    used = sum(w[used_end_age_h : used_end_age_h + used_hours])
    return used / sum(w)


def _fair(computation):
    return {
        s.team.slug: Decimal(s.fair_allocation["cpu"])
        for s in computation.snapshots.select_related("team")
    }


@pytest.mark.django_db
def test_off_the_allocations_are_todays_exactly():
    _cluster()
    heavy, _ = _teams_wanting_everything()
    _used(heavy, cpu=1000, hours=168, ending=NOW - timedelta(hours=4))
    plain = _fair(compute_shares(now=NOW))
    with override_settings(FAIRSHARE_USAGE_HALF_LIFE=0):
        again = _fair(compute_shares(now=NOW))
    with override_settings(
        FAIRSHARE_USAGE_HALF_LIFE=int(WEEK), FAIRSHARE_USAGE_STRENGTH=Decimal(0)
    ):
        zero_strength = _fair(compute_shares(now=NOW))
    assert plain == again == zero_strength == {"heavy": Decimal(500), "light": Decimal(500)}
    assert not PastUsageState.objects.exists()
    snapshot = ShareSnapshot.objects.filter(team=heavy).first()
    assert snapshot.past_usage == {} and snapshot.effective_weight is None
    assert [p["part"] for p in snapshot.explanation] == ["weighted-share"]


@pytest.mark.django_db
@override_settings(FAIRSHARE_USAGE_HALF_LIFE=int(WEEK), FAIRSHARE_USAGE_STRENGTH=Decimal("0.5"))
def test_heavy_use_last_week_moves_the_allocation_as_the_formula_says_and_halves_each_half_life():
    # 100,000 cores: the allocations are whole cores, so the gap is exact to 1 in 10,000.
    _cluster(100_000, since_days=120)
    heavy, _ = _teams_wanting_everything(100_000)
    _used(heavy, cpu=100_000, hours=168, ending=NOW - timedelta(hours=3))

    first = _fair(compute_shares(now=NOW))
    state = PastUsageState.objects.get()
    history_h = int((state.through - state.first).total_seconds() // 3600)
    # through = NOW − 3 h, the heavy team's hours end 0..167 h before it.
    u = _expected_share(used_hours=168, used_end_age_h=0, history_h=history_h, half_life_h=168)
    # Two equal teams, W = ½: m = 1 ∓ s·u, so the heavy team gets C·(1 − s·u)/2.
    expected_gap = Decimal(100_000 * 0.5 * u)
    gap = first["light"] - first["heavy"]
    assert 99_999 <= first["light"] + first["heavy"] <= 100_000
    assert first["heavy"] < 50_000 < first["light"]
    assert abs(gap - expected_gap) <= 2
    snapshot = ShareSnapshot.objects.filter(team=heavy).order_by("-computed_at").first()
    assert abs(snapshot.past_share - u) < 1e-9
    assert abs(snapshot.effective_weight - (1 - 0.5 * u)) < 1e-9
    past = next(p for p in snapshot.explanation if p["part"] == "past-use")
    assert abs(Decimal(past["amounts"]["cpu"]) - (first["heavy"] - 50_000)) <= 1
    assert "held on average" in past["words"]

    gaps = [gap]
    for weeks in (1, 2):
        later = _fair(compute_shares(now=NOW + timedelta(days=7 * weeks)))
        gaps.append(later["light"] - later["heavy"])
    # No further use: the difference halves every half-life (the 120-day history makes the
    # capacity denominator steady to within 2^(−120/7) of itself).
    for before, after in itertools.pairwise(gaps):
        assert abs(after / before - Decimal("0.5")) < Decimal("0.005"), gaps


@pytest.mark.django_db
def test_the_fold_reads_only_new_hours_and_matches_a_fold_from_scratch():
    _cluster(since_days=30)
    heavy, light = _teams_wanting_everything()
    _used(heavy, cpu=600, hours=100, ending=NOW - timedelta(hours=50))
    _used(light, cpu=200, hours=40, ending=NOW - timedelta(hours=3))
    half_life = int(3 * DAY)
    early = pastuse_io.fold(now=NOW - timedelta(hours=20), half_life=half_life)
    hours_then = early.folded_hours
    step = pastuse_io.fold(now=NOW, half_life=half_life)
    assert step.folded_hours == hours_then + 20
    incremental = (dict(step.usage), dict(step.capacity))
    PastUsageState.objects.all().delete()
    scratch = pastuse_io.fold(now=NOW, half_life=half_life)
    for team, values in scratch.usage.items():
        for resource, value in values.items():
            assert math.isclose(incremental[0][team][resource], value, rel_tol=1e-9)
    assert math.isclose(incremental[1]["cpu"], scratch.capacity["cpu"], rel_tol=1e-9)


@pytest.mark.django_db
def test_kais_normalisation_example_through_the_fold():
    # 10 GPUs for 10 hours; the team used 24 GPU-hours (8 GPUs for 3 hours). A half-life of
    # ~114 years makes decay negligible: the share is KAI's 0.24.
    CapacitySnapshot.objects.create(
        taken_at=NOW - timedelta(hours=13), source="t", resources={"nvidia.com/gpu": "10"}
    )
    team = Team.objects.create(slug="q", name="Q")
    UsageRollup.objects.bulk_create(
        UsageRollup(
            period="hour",
            start=NOW - timedelta(hours=h),
            team=team,
            namespace="q",
            resource="nvidia.com/gpu",
            allocated_hours=Decimal(8),
        )
        for h in (6, 7, 8)
    )
    state = pastuse_io.fold(now=NOW, half_life=10**9)
    assert state.folded_hours == 10
    share, _ = pastuse.dominant_past_share(state.usage[str(team.pk)], state.capacity)
    assert abs(share - 0.24) < 1e-4


@pytest.mark.django_db
def test_an_admin_sets_and_clears_the_override_with_an_audit_event(admin_user, django_user_model):
    fairness = pastuse_io.set_fairness(actor=admin_user, half_life="3d12h", strength="0.25")
    assert (fairness.half_life_seconds, fairness.strength) == (3.5 * DAY, Decimal("0.25"))
    assert (fairness.half_life_source, fairness.strength_source) == ("admin", "admin")
    event = AuditEvent.objects.get()
    assert event.after == {"half_life": "3d12h", "strength": "0.25"}
    cleared = pastuse_io.set_fairness(actor=admin_user, half_life=None, strength=None)
    assert cleared.half_life_source == "environment"
    lead = django_user_model.objects.create_user("lead", password="x")
    with pytest.raises(ValidationError) as e:
        pastuse_io.set_fairness(actor=lead, half_life="7d", strength="0.5")
    assert "half_life" in e.value.message_dict
    for half_life, strength, field in (
        ("7 days", "0.5", "half_life"),
        ("30m", "0.5", "half_life"),
        ("7d", "0.95", "strength"),
        ("7d", "abc", "strength"),
        ("7d", "0.125", "strength"),
    ):
        with pytest.raises(ValidationError) as e:
            pastuse_io.set_fairness(actor=admin_user, half_life=half_life, strength=strength)
        assert field in e.value.message_dict, (half_life, strength)
    assert AuditEvent.objects.count() == 2  # nothing half-written by the refusals


@pytest.mark.django_db
@override_settings(FAIRSHARE_USAGE_HALF_LIFE=int(WEEK), FAIRSHARE_USAGE_STRENGTH=Decimal("0.5"))
def test_the_page_and_the_api_show_the_same_explanation_to_its_lead_only(client, django_user_model):
    from quotas.models import Membership

    _cluster(1000, since_days=30)
    heavy, light = _teams_wanting_everything()
    _used(heavy, cpu=1000, hours=48, ending=NOW - timedelta(hours=3))
    compute_shares(now=NOW)
    lead = django_user_model.objects.create_user("hl", password="x")
    Membership.objects.create(team=heavy, user=lead, role="lead")
    client.force_login(lead)

    response = client.get("/api/v1/share-snapshots/current/")
    assert response.status_code == 200
    rows = {row["team"]: row for row in response.json()["results"]}
    assert sorted(rows) == ["heavy"]  # not the other team's
    stored = ShareSnapshot.objects.filter(team=heavy).get().explanation
    assert rows["heavy"]["explanation"] == stored
    assert [p["part"] for p in stored] == ["weighted-share", "past-use"]
    total = sum(Decimal(p["amounts"]["cpu"]) for p in stored)
    assert total == Decimal(rows["heavy"]["fair_allocation"]["cpu"])

    page = client.get(f"/teams/{heavy.slug}/").content.decode()
    for part in stored:
        assert part["words"].replace("'", "&#x27;") in page
        assert f'data-part="{part["part"]}"' in page
    assert client.get(f"/teams/{light.slug}/").status_code == 404


@pytest.mark.django_db
def test_the_fairness_page_is_for_admins_and_shows_field_errors(
    client, admin_user, django_user_model
):
    lead = django_user_model.objects.create_user("lead2", password="x")
    client.force_login(lead)
    assert client.get("/fairness/").status_code == 403
    assert client.post("/fairness/", {"half_life": "1d", "strength": "0.5"}).status_code == 403
    client.force_login(admin_user)
    page = client.get("/fairness/").content.decode()
    assert 'data-fairness="off"' in page
    bad = client.post("/fairness/", {"half_life": "a week", "strength": "2"})
    assert bad.status_code == 200
    text = bad.content.decode()
    assert "is not a duration" in text and "Strength must be from 0 to 0.9" in text
    assert not AuditEvent.objects.exists()
    good = client.post("/fairness/", {"half_life": "14d", "strength": "0.3"})
    assert good.status_code == 302
    assert 'data-fairness="on"' in client.get("/fairness/").content.decode()
    assert pastuse_io.current_fairness().half_life_seconds == 14 * 86400


@pytest.mark.django_db
def test_the_command_shows_the_state_and_rebuild_picks_up_a_rerolled_past_window():
    from io import StringIO

    from django.core.management import CommandError, call_command

    _cluster(1000, since_days=10)
    heavy, _ = _teams_wanting_everything()
    _used(heavy, cpu=500, hours=24, ending=NOW - timedelta(days=2))
    with pytest.raises(CommandError, match="off"):
        call_command("past_usage")
    out = StringIO()
    call_command("past_usage", "--half-life", "3d", stdout=out)
    assert "heavy:" in out.getvalue() and "half-life 3d" in out.getvalue()
    before = PastUsageState.objects.get().usage[str(heavy.pk)]["cpu"]
    # A past window re-rolled with more use: a plain fold (already past it) does not see it...
    _used(heavy, cpu=500, hours=24, ending=NOW - timedelta(days=4))
    call_command("past_usage", "--half-life", "3d", stdout=StringIO())
    assert PastUsageState.objects.get().usage[str(heavy.pk)]["cpu"] == before
    # ...a rebuild does.
    call_command("past_usage", "--half-life", "3d", "--rebuild", stdout=StringIO())
    assert PastUsageState.objects.get().usage[str(heavy.pk)]["cpu"] > before
    with pytest.raises(CommandError, match="--half-life"):
        call_command("past_usage", "--half-life", "soon")


@pytest.mark.django_db(transaction=True)
def test_changing_the_setting_recomputes_and_syncs_every_team_after_commit(admin_user):
    from quotas.signals import quota_changed

    received = []

    def listener(sender, **kwargs):
        received.append((sender.__name__, kwargs.get("team_ids"), kwargs.get("reason")))

    quota_changed.connect(listener)
    try:
        pastuse_io.set_fairness(actor=admin_user, half_life="7d", strength="0.5")
        with pytest.raises(ValidationError):
            pastuse_io.set_fairness(actor=admin_user, half_life="7 days", strength="0.5")
    finally:
        quota_changed.disconnect(listener)
    # Once, for every team (team_ids None: a full sync after the recompute); the refusal
    # sent nothing.
    assert received == [("FairnessSetting", None, "fairness-setting")]
