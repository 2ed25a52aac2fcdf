"""Forms of the quotas pages. They parse and check the shape of input (quantities, resource
names, windows); the services decide everything else, and their field-keyed ValidationErrors
are mapped back onto these forms (``add_service_errors``)."""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping, Sequence
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from quotas.choices import MembershipRole
from quotas.lines import LineInput
from quotas.models import QuotaRequest, QuotaRequestLine
from quotas.quantities import GPU, format_quantity, parse_quantity, validate_resource_name

__all__ = [
    "REBALANCE_RESOURCES",
    "DecisionForm",
    "MemberAddForm",
    "MemberRoleForm",
    "QuotaLineForm",
    "QuotaLineFormSet",
    "QuotaRequestForm",
    "RebalanceFormSet",
    "RebalanceRowForm",
    "add_service_errors",
]

DATETIME_LOCAL = "%Y-%m-%dT%H:%M"
# Rebalance edits these guarantees (form field → resource).
REBALANCE_RESOURCES = {"gpu": GPU, "cpu": "cpu", "memory": "memory"}


def _shown(value: Decimal | None, resource: str) -> str:
    return "" if value is None else format_quantity(value, resource)


def _quantity(form: forms.Form, name: str, *, required: bool) -> Decimal | None:
    raw = (form.cleaned_data.get(name) or "").strip()
    if not raw:
        if required:
            form.add_error(name, "Enter an amount.")
        return None
    try:
        return parse_quantity(raw, field=name)
    except ValidationError as e:
        form.add_error(name, e.message_dict[name])
        return None


class _ClientTimeZoneMixin:
    """Interpret datetime-local inputs in the browser's zone (the hidden ``tz`` field, filled by
    fairshare.js); without it (no JavaScript) the server's TIME_ZONE applies."""

    def client_timezone(self):
        name = (self.data.get(self.add_prefix("tz")) or "").strip() if self.is_bound else ""
        if not name or len(name) > 64:  # IANA names are short; a long one is not a zone
            return timezone.get_current_timezone()
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            return timezone.get_current_timezone()

    def full_clean(self):
        with timezone.override(self.client_timezone()):
            super().full_clean()


# --------------------------------------------------------------------------- quota requests


class QuotaLineForm(forms.Form):
    """One resource of a request: the new guarantee and limit (base-unit quantities)."""

    resource = forms.CharField(max_length=253, required=False)
    guarantee = forms.CharField(max_length=64, required=False)
    limit = forms.CharField(max_length=64, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.initial.get("resource"):
            # An existing quota: its resource is fixed, only the amounts change.
            self.fields["resource"].disabled = True
        for name in ("guarantee", "limit"):
            self.fields[name].widget.attrs.update(
                {"inputmode": "text", "autocomplete": "off", "spellcheck": "false", "size": 10}
            )
        self.fields["resource"].widget.attrs.update(
            {"list": "resource-names", "autocomplete": "off", "spellcheck": "false"}
        )

    def clean(self):
        data = super().clean()
        if self.initial.get("resource") and not self.has_changed():
            return data  # an untouched current quota is not part of the request
        resource = (data.get("resource") or "").strip()
        if not resource:
            if data.get("guarantee") or data.get("limit"):
                self.add_error("resource", "Name the resource, e.g. nvidia.com/gpu.")
            return data
        try:
            validate_resource_name(resource)
        except ValidationError as e:
            self.add_error("resource", e)
            return data
        guarantee = _quantity(self, "guarantee", required=True)
        limit = _quantity(self, "limit", required=True)
        if guarantee is None or limit is None:
            return data
        try:
            QuotaRequestLine(resource=resource, guarantee=guarantee, limit=limit).clean()
        except ValidationError as e:
            for name, messages in e.message_dict.items():
                self.add_error(name if name in self.fields else None, messages)
            return data
        data.update(resource=resource, guarantee_amount=guarantee, limit_amount=limit)
        return data


class BaseQuotaLineFormSet(forms.BaseFormSet):
    """The team's current quotas (one row each) and one blank row for a new resource.

    ``current`` maps resource → (guarantee, limit). Only rows that differ from it become lines.
    """

    def __init__(self, *args, current: Mapping[str, tuple[Decimal, Decimal | None]], **kwargs):
        self.current = dict(current)
        kwargs.setdefault(
            "initial",
            [
                {
                    "resource": resource,
                    "guarantee": _shown(g, resource),
                    "limit": _shown(lim, resource),
                }
                for resource, (g, lim) in sorted(self.current.items())
            ],
        )
        super().__init__(*args, **kwargs)

    def clean(self):
        if any(self.errors):
            return
        seen: set[str] = set()
        for form in self.forms:
            resource = form.cleaned_data.get("resource")
            if not resource:
                continue
            if resource in seen:
                form.add_error("resource", f"{resource} is already in the request.")
            seen.add(resource)

    def lines(self) -> tuple[list[LineInput], list[int]]:
        """The changed rows as LineInputs, and for each the index of its form (for errors)."""
        lines, where = [], []
        for index, form in enumerate(self.forms):
            data = form.cleaned_data
            resource = data.get("resource")
            if not resource or "guarantee_amount" not in data:
                continue
            amounts = (data["guarantee_amount"], data["limit_amount"])
            if self.current.get(resource) == amounts:
                continue
            lines.append(LineInput(resource, *amounts))
            where.append(index)
        return lines, where


QuotaLineFormSet = forms.formset_factory(
    QuotaLineForm, formset=BaseQuotaLineFormSet, extra=1, max_num=64, validate_max=True
)


class QuotaRequestForm(_ClientTimeZoneMixin, forms.Form):
    """The request's justification and optional window (a temporary grant)."""

    justification = forms.CharField(
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="What the quota is for and why now; the approvers read this.",
    )
    window_start = forms.DateTimeField(
        required=False,
        label="Temporary from",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME_LOCAL),
        help_text="Leave both empty for a permanent change; an empty start means at approval.",
    )
    window_end = forms.DateTimeField(
        required=False,
        label="Temporary until",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME_LOCAL),
        help_text="The quota reverts by itself at this time.",
    )
    tz = forms.CharField(required=False, widget=forms.HiddenInput(attrs={"data-local-tz": ""}))

    def clean(self):
        data = super().clean()
        start, end = data.get("window_start"), data.get("window_end")
        if start and not end:
            self.add_error("window_end", "A temporary request needs an end.")
        elif end and start and end <= start:
            self.add_error("window_end", "The window must end after it starts.")
        elif end and end <= timezone.now():
            self.add_error("window_end", "The window must end in the future.")
        return data


# --------------------------------------------------------------------------- decisions


class DecisionForm(forms.Form):
    """Approve (optionally with adjusted amounts) or reject (with a reason) one request.

    One guarantee/limit field pair per line, prefilled with the requested amounts; the
    ``adjustments()`` are the lines whose amounts the approver changed.
    """

    note = forms.CharField(
        required=False,
        max_length=5000,
        label="Note to the team",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required when rejecting.",
    )

    def __init__(self, *args, quota_request: QuotaRequest, **kwargs):
        kwargs.setdefault("prefix", f"r{quota_request.pk}")
        super().__init__(*args, **kwargs)
        self.quota_request = quota_request
        self.line_fields: list[tuple[QuotaRequestLine, str, str]] = []
        for index, line in enumerate(quota_request.lines.all()):
            g_name, l_name = f"line{index}_guarantee", f"line{index}_limit"
            self.fields[g_name] = forms.CharField(
                label=f"{line.resource} guarantee",
                initial=_shown(line.guarantee, line.resource),
                max_length=64,
            )
            self.fields[l_name] = forms.CharField(
                label=f"{line.resource} limit",
                initial=_shown(line.limit, line.resource),
                max_length=64,
            )
            for name in (g_name, l_name):
                self.fields[name].widget.attrs.update({"autocomplete": "off", "size": 8})
            self.line_fields.append((line, g_name, l_name))

    def clean(self):
        data = super().clean()
        adjustments = {}
        for line, g_name, l_name in self.line_fields:
            guarantee = _quantity(self, g_name, required=True)
            limit = _quantity(self, l_name, required=True)
            if guarantee is None or limit is None:
                continue
            if guarantee > limit:
                self.add_error(g_name, "Guarantee cannot exceed the limit.")
                continue
            if (guarantee, limit) != (line.guarantee, line.limit):
                adjustments[line.resource] = (guarantee, limit)
        data["adjustments"] = adjustments
        return data

    def adjustments(self) -> dict[str, tuple[Decimal, Decimal]]:
        return self.cleaned_data.get("adjustments", {})

    def field_for(self, resource: str, part: str = "guarantee") -> str | None:
        for line, g_name, l_name in self.line_fields:
            if line.resource == resource:
                return g_name if part == "guarantee" else l_name
        return None

    def line_rows(self):
        """(line, guarantee bound field, limit bound field) for the template."""
        return [(line, self[g], self[lim]) for line, g, lim in self.line_fields]


# --------------------------------------------------------------------------- members


class MemberAddForm(forms.Form):
    username = forms.CharField(
        max_length=150, widget=forms.TextInput(attrs={"autocomplete": "off"})
    )
    role = forms.ChoiceField(choices=MembershipRole.choices, initial=MembershipRole.MEMBER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=MembershipRole.choices)


# --------------------------------------------------------------------------- rebalance


class RebalanceRowForm(forms.Form):
    """One team's weight, tier and GPU/cpu/memory guarantees; blank guarantees stay as they are."""

    team = forms.CharField(widget=forms.HiddenInput)
    weight = forms.IntegerField(min_value=1, max_value=65535)
    tier = forms.ChoiceField(required=False)
    gpu = forms.CharField(required=False, max_length=64, label="GPU guarantee")
    cpu = forms.CharField(required=False, max_length=64, label="CPU guarantee")
    memory = forms.CharField(required=False, max_length=64, label="Memory guarantee")

    def __init__(self, *args, tier_choices: Sequence[tuple[str, str]] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].disabled = True  # rows are the teams the page was built for
        self.fields["tier"].choices = [("", "— none —"), *tier_choices]
        self.fields["weight"].widget.attrs.update({"size": 6})
        for name in REBALANCE_RESOURCES:
            self.fields[name].widget.attrs.update({"size": 8, "autocomplete": "off"})

    def clean(self):
        data = super().clean()
        for name in REBALANCE_RESOURCES:
            data[f"{name}_amount"] = _quantity(self, name, required=False)
        return data

    def change(self) -> dict:
        """The row's change in the shape ``rebalance``/``what_if`` take ({} when unchanged)."""
        data, initial = self.cleaned_data, self.initial
        change: dict = {}
        if data.get("weight") is not None and data["weight"] != initial.get("weight"):
            change["weight"] = data["weight"]
        if (data.get("tier") or "") != str(initial.get("tier") or ""):
            change["tier"] = int(data["tier"]) if data.get("tier") else None
        current = initial.get("guarantees", {})
        for name, resource in REBALANCE_RESOURCES.items():
            amount = data.get(f"{name}_amount")
            if amount is not None and amount != current.get(resource, Decimal(0)):
                change.setdefault("guarantee", {})[resource] = amount
        return change


class BaseRebalanceFormSet(forms.BaseFormSet):
    def changes(self) -> dict[str, dict]:
        """{team slug: change} for the rows that changed."""
        result = {}
        for form in self.forms:
            change = form.change()
            if change:
                result[form.initial["team"]] = change
        return result

    def form_for(self, slug: str):
        return next((f for f in self.forms if f.initial.get("team") == slug), None)


RebalanceFormSet = forms.formset_factory(
    RebalanceRowForm, formset=BaseRebalanceFormSet, extra=0, max_num=5000
)


def rebalance_initial(team, guarantees: Mapping[str, Decimal]) -> dict:
    """A rebalance row's initial data for ``team`` with its current ``guarantees``."""
    row = {
        "team": team.slug,
        "weight": team.weight,
        "tier": str(team.tier_id or ""),
        "guarantees": dict(guarantees),
    }
    for name, resource in REBALANCE_RESOURCES.items():
        row[name] = _shown(guarantees.get(resource), resource)
    return row


# --------------------------------------------------------------------------- service errors

_LINE_KEY = re.compile(r"^lines\[(\d+)\]\.(\w+)$")


def _messages(error: ValidationError) -> dict[str | None, list[str]]:
    if hasattr(error, "error_dict"):
        return dict(error.message_dict)
    return {None: error.messages}


def add_service_errors(
    error: ValidationError,
    form: forms.Form,
    *,
    formset: forms.BaseFormSet | None = None,
    line_forms: Sequence[int] = (),
) -> None:
    """Attach a service's field-keyed ValidationError to the forms it came from.

    ``lines[i].field`` goes to the formset row ``line_forms[i]`` (rows that were sent as lines);
    keys that name a field of ``form`` go there; everything else is a non-field error of ``form``.
    """
    for key, messages in _messages(error).items():
        match = _LINE_KEY.match(key or "")
        if match and formset is not None and int(match.group(1)) < len(line_forms):
            row = formset.forms[line_forms[int(match.group(1))]]
            name = match.group(2)
            row.add_error(name if name in row.fields else None, messages)
        elif key in form.fields and key != "tz":
            form.add_error(key, messages)
        else:
            form.add_error(None, messages)


def add_rebalance_errors(error: ValidationError, formset: BaseRebalanceFormSet) -> list[str]:
    """Attach ``<slug>.<field>[.<resource>]`` errors to the rebalance rows; return the rest."""
    fields_by_resource = {resource: name for name, resource in REBALANCE_RESOURCES.items()}
    leftover = []
    for key, messages in _messages(error).items():
        slug, _, rest = (key or "").partition(".")
        form = formset.form_for(slug)
        if form is None:
            leftover.extend(messages)
            continue
        name, _, resource = rest.partition(".")
        if name == "guarantee" and resource in fields_by_resource:
            form.add_error(fields_by_resource[resource], messages)
        elif name in ("weight", "tier"):
            form.add_error(name, messages)
        else:
            form.add_error(None, messages)
    return leftover
