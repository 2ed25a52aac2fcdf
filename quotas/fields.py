"""Model fields shared by the tenancy models."""

from __future__ import annotations

import re
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from quotas.quantities import parse_quantity

dns1123_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', "
    "starting and ending with a letter or digit.",
    code="dns1123_label",
)


class QuantityField(models.DecimalField):
    """An exact Kubernetes quantity stored in base units (cores, bytes, devices).

    Accepts Decimals, ints and quantity strings (``500m``, ``64Gi``) and parses them with
    the Kubernetes grammar; the error names the rule.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_digits", 30)
        kwargs.setdefault("decimal_places", 3)
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        if kwargs.get("max_digits") == 30:
            del kwargs["max_digits"]
        if kwargs.get("decimal_places") == 3:
            del kwargs["decimal_places"]
        return name, path, args, kwargs

    def to_python(self, value):
        if value is None or value == "":
            return None
        if isinstance(value, Decimal):
            return value
        try:
            return parse_quantity(value, field=self.name or "quantity")
        except ValidationError as e:
            raise ValidationError(e.message_dict.get(self.name or "quantity", e.messages)) from None


# Kubernetes label syntax, from k8s.io/apimachinery/pkg/util/validation/validation.go
# (IsQualifiedName for keys, IsValidLabelValue for values, IsDNS1123Subdomain for key prefixes).
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_MAX = 63  # validation.go: qualifiedNameMaxLength, LabelValueMaxLength
LABEL_PREFIX_MAX = 253  # DNS1123SubdomainMaxLength


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid Kubernetes label key (empty list: it is)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return ["the prefix before '/' must not be empty"]
    errors = []
    if slash and (len(prefix) > LABEL_PREFIX_MAX or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.append(
            "the prefix must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', "
            f"at most {LABEL_PREFIX_MAX} characters)"
        )
    if not name or len(name) > LABEL_NAME_MAX or not _QUALIFIED_NAME.match(name):
        errors.append(
            f"the name must be 1-{LABEL_NAME_MAX} letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid Kubernetes label value (empty list: it is)."""
    if len(value) > LABEL_NAME_MAX or not _LABEL_VALUE.match(value):
        return [
            f"a label value must be empty or 1-{LABEL_NAME_MAX} letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit"
        ]
    return []
