"""The PostgreSQL fast path: one query sums rollup rows per segment and group, in ``numeric``.

SQL numbers a row's segment with ``width_bucket(start, <segment starts>)`` (a binary search),
sums per (segment, team id, namespace, resource, flavor) with exact ``numeric`` sums, and joins
team slugs and cost centres onto the (few) summed rows only afterwards.

Invariant: it returns exactly what ``portable.sum_rows_in_python`` returns for the same rows
(tests/api/test_chargeback.py compares them); ``reading.sum_rows`` picks one of the two.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Case, F, Func, IntegerField, Sum, Value, When

from quotas.models import Team

from .sums import UNASSIGNED, Sums


def segment_number(segments: list[tuple[datetime, datetime]]):
    """SQL numbering a row by the segment its ``start`` falls in (1-based, ordered segments)."""
    if len(segments) == 1:
        return Value(1)
    return Func(
        F("start"),
        Value([lo for lo, _ in segments]),
        function="width_bucket",
        output_field=IntegerField(),
    )


def sum_rows_in_sql(
    queryset,
    plain: list[tuple[datetime, datetime]],
    segments_of: dict[str, list[tuple[datetime, datetime]]],
    by_team: bool,
    by_namespace: bool,
    sums: dict[str, Sum],
) -> list[tuple]:
    """One query: ``sums`` per (segment, group) of the rows of ``queryset``.

    ``plain`` are the segments of resources without cuts, ``segments_of`` those of the others
    (``reading.sum_rows``). Returns ``(segment, group, Sums)`` triples, like the portable path.
    """
    number = segment_number(plain)
    if segments_of:
        number = Case(
            *(When(resource=r, then=segment_number(s)) for r, s in segments_of.items()),
            default=number,
            output_field=IntegerField(),
        )
    group = [("team" if by_team else None), ("namespace" if by_namespace else None)]
    columns = [name for name in group if name] + ["resource", "flavor"]
    rows = queryset.order_by().annotate(seg=number).values("seg", *columns).annotate(**sums)
    try:
        sql, params = rows.query.sql_with_params()
    except EmptyResultSet:  # visible_to() found nothing
        return []
    if by_team:
        sql = (
            f'SELECT s.*, t.slug, t.cost_center FROM ({sql}) s LEFT JOIN "{Team._meta.db_table}" t'
            ' ON t.id = s."team"'
        )
    with connections[rows.db].cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description]
        data = cursor.fetchall()
    at = {name: i for i, name in enumerate(names)}
    seg, resource, flavor = at["seg"], at["resource"], at["flavor"]
    a, u, g, ga, au = at["a"], at["u"], at["g"], at["ga"], at["au"]
    team, slug, cost_center = at.get("team"), at.get("slug"), at.get("cost_center")
    namespace = at.get("namespace")
    out = []
    for row in data:
        if by_team:
            group_team = row[slug] if row[team] is not None else UNASSIGNED
            group_cost_center = row[cost_center] or ""
        else:
            group_team = group_cost_center = ""
        out.append(
            (
                segments_of.get(row[resource], plain)[row[seg] - 1],
                (
                    group_team,
                    group_cost_center,
                    row[namespace] if namespace is not None else "",
                    row[resource],
                    row[flavor],
                ),
                Sums(row[a], row[u], row[g], row[ga], row[a] - row[au]),
            )
        )
    return out
