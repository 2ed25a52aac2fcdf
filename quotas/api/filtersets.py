"""django-filter FilterSets of the quotas API.

Every list answers ``?updated_after=`` (ISO 8601) for polling: ask for what changed since the
newest ``updated`` you have seen.
"""

from __future__ import annotations

from datetime import UTC

import django_filters as filters
from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django_filters.fields import IsoDateTimeField

from quotas.models import (
    ApiToken,
    AuditEvent,
    Budget,
    Membership,
    Namespace,
    PriorityTier,
    QuotaRequest,
    Team,
    TeamQuota,
)


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, converted to UTC while the form is cleaned.

    Python accepts UTC offsets up to ±23:59 and PostgreSQL only up to ±15:59, so the value is
    converted before it reaches the database; a time that leaves the calendar on the way
    (``0001-01-01T00:00:00+14:00``) is a form error, so a 400 naming the parameter. Done here
    rather than in the filter so that filters with a ``method`` get it too.
    """

    default_error_messages = {"out_of_range": "This time is out of range."}

    def to_python(self, value):
        result = super().to_python(value)
        if result is None:
            return None
        try:
            return result.astimezone(UTC)
        except (OverflowError, ValueError):
            raise ValidationError(
                self.error_messages["out_of_range"], code="out_of_range"
            ) from None


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    """An ISO 8601 time, compared in UTC (see UtcIsoDateTimeField)."""

    field_class = UtcIsoDateTimeField


class StrictBooleanField(forms.Field):
    """``true``/``false`` (or ``1``/``0``); anything else is an error, not "no filter"
    (django-filter's own boolean filter quietly ignores values it cannot read)."""

    default_error_messages = {"invalid": "Give true or false."}

    def to_python(self, value):
        if value in (None, ""):
            return None
        text = str(value).strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        raise ValidationError(self.error_messages["invalid"], code="invalid")


class StrictBooleanFilter(filters.BooleanFilter):
    field_class = StrictBooleanField


class FilterSet(filters.FilterSet):
    """The base of every API FilterSet: model booleans filter strictly (StrictBooleanFilter)."""

    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }


class TeamSlugFilter(filters.CharFilter):
    """``?team=<slug>`` on models with a team foreign key."""

    def __init__(self, field_name: str = "team__slug", **kwargs):
        kwargs.setdefault("help_text", "Team slug.")
        super().__init__(field_name=field_name, **kwargs)


class UpdatedFilterSet(FilterSet):
    updated_after = UtcDateTimeFilter(
        field_name="updated", lookup_expr="gt", help_text="Only rows changed after this time."
    )


class TeamFilterSet(UpdatedFilterSet):
    parent = filters.CharFilter(field_name="parent__slug", help_text="Department slug.")
    tier = filters.CharFilter(field_name="tier__name")

    class Meta:
        model = Team
        fields = ["active", "cost_center", "reclaimable"]


class NamespaceFilterSet(UpdatedFilterSet):
    team = TeamSlugFilter()

    class Meta:
        model = Namespace
        fields = ["managed"]


class MembershipFilterSet(UpdatedFilterSet):
    team = TeamSlugFilter()
    user = filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["role"]


class TeamQuotaFilterSet(UpdatedFilterSet):
    team = TeamSlugFilter()

    class Meta:
        model = TeamQuota
        fields = ["resource"]


class PriorityTierFilterSet(UpdatedFilterSet):
    class Meta:
        model = PriorityTier
        fields = ["preemption_policy", "reclaimable"]


class QuotaRequestFilterSet(UpdatedFilterSet):
    team = TeamSlugFilter()
    requester = filters.CharFilter(field_name="requester__username")
    created_after = UtcDateTimeFilter(field_name="created", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created", lookup_expr="lt")

    class Meta:
        model = QuotaRequest
        fields = ["status"]


class BudgetFilterSet(UpdatedFilterSet):
    team = TeamSlugFilter()

    class Meta:
        model = Budget
        fields = ["resource"]


class AuditEventFilterSet(FilterSet):
    team = TeamSlugFilter()
    actor = filters.CharFilter(field_name="actor_name")
    created_after = UtcDateTimeFilter(field_name="created", lookup_expr="gt")
    created_before = UtcDateTimeFilter(field_name="created", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["verb", "object_type", "object_id"]


class ApiTokenFilterSet(FilterSet):
    revoked = StrictBooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiToken
        fields = ["kind", "node"]
