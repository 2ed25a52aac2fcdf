"""Serializer fields shared by every app's API: Kubernetes quantities and team references."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.models import Team
from quotas.quantities import format_quantity, parse_quantity


@extend_schema_field(
    {
        "type": "string",
        "description": "Kubernetes quantity (500m, 64Gi, 8); rendered canonically.",
        "example": "8",
    }
)
class QuantityField(serializers.Field):
    """A Kubernetes quantity: accepts ``"500m"``, ``"64Gi"``, ``8``; renders canonically.

    Rendering needs the resource (bytes get binary suffixes), read from ``resource_field`` of the
    object being serialized.
    """

    def __init__(self, *, resource_field: str = "resource", **kwargs):
        self.resource_field = resource_field
        super().__init__(**kwargs)

    def get_attribute(self, instance):
        value = super().get_attribute(instance)
        return getattr(instance, self.resource_field, ""), value

    def to_representation(self, value):
        resource, amount = value
        return None if amount is None else format_quantity(amount, resource or "")

    def to_internal_value(self, data) -> Decimal:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            raise serializers.ValidationError("Give a Kubernetes quantity such as 500m, 64Gi or 8.")
        try:
            return parse_quantity(data, field="value")
        except DjangoValidationError as e:
            raise serializers.ValidationError(e.message_dict.get("value", e.messages)) from None


def canonical_amounts(amounts: dict | None) -> dict[str, str]:
    """Render a {resource: base-unit amount} JSON map canonically (unparseable values kept)."""
    out = {}
    for resource, value in (amounts or {}).items():
        try:
            out[resource] = format_quantity(Decimal(str(value)), resource)
        except (InvalidOperation, ValueError):
            out[resource] = str(value)
    return out


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class AmountMapField(serializers.ReadOnlyField):
    """A read-only {resource: quantity} map rendered canonically."""

    def to_representation(self, value):
        return canonical_amounts(value)


class VisibleTeamField(serializers.SlugRelatedField):
    """A team referenced by slug, looked up among the teams the requesting user can see.

    A team the user cannot see reads "does not exist", exactly like a typo, so that writes don't
    reveal other teams.
    """

    default_error_messages = {"does_not_exist": "No such team: {value}."}

    def __init__(self, **kwargs):
        kwargs.setdefault("slug_field", "slug")
        super().__init__(**kwargs)

    def get_queryset(self):
        request = self.context.get("request")
        return Team.objects.visible_to(getattr(request, "user", None))


class DepartmentField(serializers.SlugRelatedField):
    """A team's department by slug; read as null when the requesting user cannot see it (a
    member of one team does not learn its department's name), written by admins as any slug."""

    def __init__(self, **kwargs):
        kwargs.setdefault("slug_field", "slug")
        super().__init__(**kwargs)

    def to_representation(self, value):
        if value.pk not in self._visible_ids():
            return None
        return super().to_representation(value)

    def _visible_ids(self):
        # One query per response, shared by every row of a list (they share the context).
        cached = self.context.get("_visible_team_ids")
        if cached is None:
            request = self.context.get("request")
            user = getattr(request, "user", None)
            cached = set(Team.objects.visible_to(user).values_list("pk", flat=True))
            self.context["_visible_team_ids"] = cached
        return cached
