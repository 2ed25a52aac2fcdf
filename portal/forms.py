"""Forms of the portal's own pages (the quota and request forms live in ``quotas.forms``)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django import forms
from django.utils import timezone

from quotas.models import ApiToken
from quotas.tokens import SCOPES, default_lifetime_days, max_lifetime_days


class NoteForm(forms.Form):
    """A short note for the audit trail (direct quota edits, ending a grant early)."""

    note = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Kept in the audit trail.",
    )


class TokenForm(forms.Form):
    """A new API token. The expiry is required (a date: the token stops at its start, UTC);
    the service (``quotas.tokens.issue_token``) applies the lifetime rules."""

    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. ci-reports.")
    kind = forms.ChoiceField(choices=[(ApiToken.Kind.PERSONAL, "Personal (acts as you)")])
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in SCOPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Service tokens only: what the token may read.",
    )
    node = forms.CharField(
        max_length=253, required=False, help_text="Node-agent tokens only: the node it posts for."
    )
    expires_on = forms.DateField(
        label="Expires on",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Required. The token stops working at the start of this day (UTC).",
    )

    def __init__(self, *args, admin: bool = False, **kwargs):
        today = timezone.now().astimezone(UTC).date()
        kwargs.setdefault("initial", {}).setdefault(
            "expires_on", today + timedelta(days=default_lifetime_days())
        )
        super().__init__(*args, **kwargs)
        if admin:
            self.fields["kind"].choices = [
                (ApiToken.Kind.PERSONAL, "Personal (acts as you)"),
                (ApiToken.Kind.SERVICE, "Service (read-only, scoped)"),
                (ApiToken.Kind.NODE_AGENT, "Node agent (posts GPU samples)"),
            ]
        else:
            del self.fields["scopes"]
            del self.fields["node"]
        widget = self.fields["expires_on"].widget
        widget.attrs.update(
            {
                "min": (today + timedelta(days=1)).isoformat(),
                "max": (today + timedelta(days=max_lifetime_days())).isoformat(),
            }
        )

    def expires_at(self) -> datetime:
        return datetime.combine(self.cleaned_data["expires_on"], time.min, tzinfo=UTC)


class QueueFilterForm(forms.Form):
    """The approval queue's filters and sort order (GET parameters; all optional)."""

    SORTS = {
        "oldest": ("created", "id"),
        "newest": ("-created", "-id"),
        "team": ("team__slug", "created", "id"),
    }

    team = forms.SlugField(required=False, max_length=63)
    department = forms.SlugField(required=False, max_length=63)
    resource = forms.CharField(required=False, max_length=253)
    older_than = forms.IntegerField(
        required=False, min_value=0, max_value=3650, label="Waiting at least (days)"
    )
    temporary = forms.ChoiceField(
        required=False,
        choices=[("", "Any"), ("yes", "Temporary only"), ("no", "Permanent only")],
    )
    sort = forms.ChoiceField(
        required=False,
        choices=[("oldest", "Oldest first"), ("newest", "Newest first"), ("team", "By team")],
    )

    def apply(self, queryset, *, now: datetime):
        """``queryset`` filtered and ordered as chosen (oldest first when nothing is)."""
        data = self.cleaned_data if self.is_valid() else {}
        if data.get("team"):
            queryset = queryset.filter(team__slug=data["team"])
        if data.get("department"):
            queryset = queryset.filter(team__parent__slug=data["department"])
        if data.get("resource"):
            queryset = queryset.filter(lines__resource=data["resource"].strip()).distinct()
        if data.get("older_than") is not None:
            queryset = queryset.filter(created__lte=now - timedelta(days=data["older_than"]))
        if data.get("temporary") == "yes":
            queryset = queryset.filter(window_end__isnull=False)
        elif data.get("temporary") == "no":
            queryset = queryset.filter(window_end__isnull=True)
        return queryset.order_by(*self.SORTS[data.get("sort") or "oldest"])


class BulkRejectForm(forms.Form):
    """Reject the ticked requests of the queue, with one reason."""

    requests = forms.TypedMultipleChoiceField(coerce=int, choices=())
    note = forms.CharField(
        max_length=2000,
        label="Reason",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Sent to each team with the rejection.",
    )

    def __init__(self, *args, pending_ids=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["requests"].choices = [(pk, f"#{pk}") for pk in pending_ids]
        self.fields["requests"].error_messages["invalid_choice"] = (
            "Request %(value)s is no longer pending."
        )
