"""Forms of the quotas pages: quantity parsing, which rows become request lines, adjustments,
rebalance rows, and how service errors are mapped back onto fields."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from quotas import decisions
from quotas.forms import (
    DecisionForm,
    QuotaLineFormSet,
    QuotaRequestForm,
    RebalanceFormSet,
    RebalanceRowForm,
    add_rebalance_errors,
    add_service_errors,
    rebalance_initial,
)
from quotas.lines import LineInput
from tests.base import GPU

CURRENT = {GPU: (Decimal(20), Decimal(40)), "cpu": (Decimal(4), None)}


def line_data(rows: list[tuple[str, str, str]], *, initial: int = 2) -> dict:
    data = {
        "lines-TOTAL_FORMS": str(len(rows)),
        "lines-INITIAL_FORMS": str(initial),
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "64",
    }
    for i, (resource, guarantee, limit) in enumerate(rows):
        data |= {
            f"lines-{i}-resource": resource,
            f"lines-{i}-guarantee": guarantee,
            f"lines-{i}-limit": limit,
        }
    return data


def formset(rows) -> QuotaLineFormSet:
    return QuotaLineFormSet(line_data(rows), current=CURRENT, prefix="lines")


# --------------------------------------------------------------------------- request lines


def test_the_formset_starts_with_current_quotas_sorted_and_one_blank_row():
    fs = QuotaLineFormSet(current=CURRENT, prefix="lines")

    assert [f.initial for f in fs.forms[:2]] == [
        {"resource": "cpu", "guarantee": "4", "limit": ""},
        {"resource": GPU, "guarantee": "20", "limit": "40"},
    ]
    assert fs.forms[0].fields["resource"].disabled
    assert not fs.forms[2].fields["resource"].disabled


def test_only_changed_rows_become_lines_with_the_index_of_their_row():
    fs = formset([("", "4", ""), ("", "24", "48"), ("memory", "1Gi", "2Gi")])

    assert fs.is_valid(), fs.errors
    lines, rows = fs.lines()
    assert lines == [
        LineInput(GPU, Decimal(24), Decimal(48)),
        LineInput("memory", Decimal(2**30), Decimal(2**31)),
    ]
    assert rows == [1, 2]


def test_an_unchanged_row_without_a_limit_is_not_an_error():
    fs = formset([("", "4", ""), ("", "20", "40"), ("", "", "")])

    assert fs.is_valid(), fs.errors
    assert fs.lines() == ([], [])


def test_a_changed_row_needs_a_limit():
    fs = formset([("", "6", ""), ("", "20", "40"), ("", "", "")])

    assert not fs.is_valid()
    assert fs.forms[0].errors["limit"] == ["Enter an amount."]


def test_the_resource_of_an_existing_row_cannot_be_changed_by_posting_another():
    fs = formset([("memory", "4", "8"), ("", "20", "40"), ("", "", "")])

    assert fs.is_valid()
    assert fs.lines()[0] == [LineInput("cpu", Decimal(4), Decimal(8))]


def test_a_new_row_repeating_an_existing_resource_is_refused():
    fs = formset([("", "4", ""), ("", "20", "40"), ("nvidia.com/gpu", "1", "2")])

    assert not fs.is_valid()
    assert "already in the request" in fs.forms[2].errors["resource"][0]


@pytest.mark.parametrize(
    ("guarantee", "limit", "field", "message"),
    [
        ("1.5", "2", "guarantee", "whole devices"),
        ("3", "2", "guarantee", "cannot exceed the limit"),
        ("1e30", "1e30", "guarantee", "at most"),
        ("2", "many", "limit", "not a Kubernetes quantity"),
    ],
)
def test_amounts_are_checked_like_the_model_checks_them(guarantee, limit, field, message):
    fs = formset([("", "4", ""), ("", "20", "40"), ("nvidia.com/mig-1g.10gb", guarantee, limit)])

    assert not fs.is_valid()
    assert message in " ".join(fs.forms[2].errors[field])


# --------------------------------------------------------------------------- request form


def test_an_unknown_time_zone_falls_back_to_the_servers():
    form = QuotaRequestForm(
        {"justification": "x", "window_end": "2099-05-01T12:00", "tz": "Mars/Olympus"}
    )

    assert form.is_valid(), form.errors
    assert form.cleaned_data["window_end"].isoformat() == "2099-05-01T12:00:00+00:00"


# --------------------------------------------------------------------------- service errors


def test_line_errors_go_to_the_row_that_was_sent_as_that_line():
    fs = formset([("", "4", ""), ("", "24", "48"), ("memory", "1Gi", "2Gi")])
    form = QuotaRequestForm({"justification": "x"})
    assert fs.is_valid() and form.is_valid()
    _, rows = fs.lines()

    add_service_errors(
        ValidationError(
            {
                "lines[1].limit": ["Too much memory."],
                "window_end": ["Too late."],
                "lines": ["The requested amounts equal the current quota."],
                "team": ["This team is inactive."],
            }
        ),
        form,
        formset=fs,
        line_forms=rows,
    )

    assert fs.forms[2].errors["limit"] == ["Too much memory."]
    assert form.errors["window_end"] == ["Too late."]
    assert form.non_field_errors() == [
        "The requested amounts equal the current quota.",
        "This team is inactive.",
    ]


def test_a_message_without_a_field_is_a_non_field_error():
    form = QuotaRequestForm({"justification": "x"})
    assert form.is_valid()

    add_service_errors(ValidationError("Something else."), form)

    assert form.non_field_errors() == ["Something else."]


# --------------------------------------------------------------------------- decisions


@pytest.mark.django_db
def test_a_decision_form_reports_only_the_lines_the_approver_changed(cast):
    req = decisions.submit_request(
        team=cast.team_a,
        requester=cast.alice,
        lines=[LineInput(GPU, "30", "50"), LineInput("cpu", "8", "16")],
        justification="x",
    )
    p = f"r{req.pk}"
    # Lines are ordered by resource: cpu first.
    data = {f"{p}-line0_guarantee": "8", f"{p}-line0_limit": "16"}

    form = DecisionForm(
        data | {f"{p}-line1_guarantee": "24", f"{p}-line1_limit": "50"}, quota_request=req
    )
    assert form.is_valid(), form.errors
    assert form.adjustments() == {GPU: (Decimal(24), Decimal(50))}
    assert form.field_for(GPU) == "line1_guarantee" and form.field_for("cpu", "limit") == (
        "line0_limit"
    )

    bad = DecisionForm(
        data | {f"{p}-line1_guarantee": "60", f"{p}-line1_limit": "50"}, quota_request=req
    )
    assert not bad.is_valid()
    assert bad.errors["line1_guarantee"] == ["Guarantee cannot exceed the limit."]


# --------------------------------------------------------------------------- rebalance rows


@pytest.mark.django_db
def test_a_rebalance_row_reports_only_what_changed(cast):
    initial = rebalance_initial(cast.team_a, {GPU: Decimal(20)})
    tiers = [(str(cast.tier.pk), cast.tier.name)]

    def row(**data):
        base = {"weight": "1", "tier": str(cast.tier.pk), "gpu": "20", "cpu": "", "memory": ""}
        form = RebalanceRowForm(base | data, initial=initial, tier_choices=tiers)
        assert form.is_valid(), form.errors
        return form.change()

    assert row() == {}
    assert row(weight="5") == {"weight": 5}
    assert row(tier="") == {"tier": None}
    assert row(gpu="20.0") == {}
    assert row(gpu="0", memory="64Gi") == {
        "guarantee": {GPU: Decimal(0), "memory": Decimal(64 * 2**30)}
    }


@pytest.mark.django_db
def test_rebalance_errors_are_attached_to_the_team_row_and_field(cast):
    initial = [rebalance_initial(t, {}) for t in (cast.team_a, cast.team_b)]
    fs = RebalanceFormSet(initial=initial, prefix="teams")
    data = {"teams-TOTAL_FORMS": "2", "teams-INITIAL_FORMS": "2"}
    for i, t in enumerate((cast.team_a, cast.team_b)):
        data |= {f"teams-{i}-weight": str(t.weight), f"teams-{i}-tier": ""}
    fs = RebalanceFormSet(data, initial=initial, prefix="teams")
    assert fs.is_valid(), fs.errors

    leftover = add_rebalance_errors(
        ValidationError(
            {
                "team-b.guarantee.memory": ["Guarantee cannot exceed the limit."],
                "team-a.weight": ["Weight must be an integer from 1 to 65535."],
                "ghost": ["There is no team 'ghost'."],
            }
        ),
        fs,
    )

    assert fs.form_for("team-b").errors["memory"] == ["Guarantee cannot exceed the limit."]
    assert fs.form_for("team-a").errors["weight"] == ["Weight must be an integer from 1 to 65535."]
    assert leftover == ["There is no team 'ghost'."]
