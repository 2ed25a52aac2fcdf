"""Model fields shared by the tenancy models."""

from __future__ import annotations

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
