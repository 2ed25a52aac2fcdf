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
