"""A quota line as requests and direct changes take it (resource, guarantee, limit), and its
validation: field errors named ``lines[i].field``, all lines checked before any is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from django.core.exceptions import ValidationError

from quotas.models import QuotaRequestLine
from quotas.quantities import (
    parse_quantity,
    validate_resource_name,
)


@dataclass(frozen=True)
class LineInput:
    resource: str
    guarantee: Decimal | str | int
    limit: Decimal | str | int | None


def parse_lines(lines: Iterable[LineInput | Mapping]) -> list[LineInput]:
    """Parse and validate every line (resource name, quantities, guarantee ≤ limit, no resource
    twice, at least one line); raise one ValidationError with all the field errors."""
    parsed: list[LineInput] = []
    errors: dict[str, list[str]] = {}
    seen: set[str] = set()
    for index, raw in enumerate(lines):
        line = raw if isinstance(raw, LineInput) else LineInput(**raw)
        prefix = f"lines[{index}]"
        try:
            validate_resource_name(line.resource)
        except ValidationError as e:
            errors[f"{prefix}.resource"] = e.messages
            continue
        if line.resource in seen:
            errors[f"{prefix}.resource"] = [f"{line.resource} appears more than once."]
            continue
        seen.add(line.resource)
        try:
            guarantee = parse_quantity(line.guarantee, field="guarantee")
            if line.limit is None or line.limit == "":
                raise ValidationError({"limit": "A new limit is required."})
            limit = parse_quantity(line.limit, field="limit")
            QuotaRequestLine(resource=line.resource, guarantee=guarantee, limit=limit).clean()
        except ValidationError as e:
            for field, messages in e.message_dict.items():
                errors[f"{prefix}.{field}"] = messages
            continue
        parsed.append(LineInput(line.resource, guarantee, limit))
    if not parsed and not errors:
        errors["lines"] = ["A request needs at least one resource."]
    if errors:
        raise ValidationError(errors)
    return parsed
