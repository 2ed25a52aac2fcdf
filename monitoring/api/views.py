"""REST API of the monitoring app: usage, GPU samples (and their ingest), capacity, rate cards,
chargeback reports and frozen statements."""

from __future__ import annotations

import time
from dataclasses import asdict

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from config.api import SurrogateSafeJSONRenderer
from monitoring import chargeback
from monitoring.api import filtersets, serializers
from monitoring.api.renderers import ChargebackCSVRenderer
from monitoring.domain.chargeback import CSV_COLUMNS
from monitoring.models import (
    CapacitySnapshot,
    ChargebackStatement,
    GpuSample,
    RateCard,
    UsageRollup,
    UsageSample,
    Workload,
)
from monitoring.usage import current_usage
from monitoring.workloads import blocker_dicts, latest_workloads, team_waits, workload_blockers
from quotas.api.authentication import token_of
from quotas.api.fields import canonical_amounts
from quotas.api.mixins import AuditedWriteMixin
from quotas.api.permissions import IsNodeAgentToken, IsSiteAdminOrReadOnly, with_defaults
from quotas.models import ApiToken, Team
from quotas.querysets import is_site_admin

CHARGEBACK_SCOPES = ("read:chargeback",)
_clock = time.time  # tests replace it


class IngestSampleThrottle(BaseThrottle):
    """Ingest counted in samples, not requests (issue 27): each node-agent token may send
    ``FAIRSHARE_GPU_INGEST_SAMPLES_PER_MINUTE`` (600) samples a minute, in fixed minute
    windows. The count is an atomic cache increment (Redis ``INCRBY``) that a refused batch
    takes back; the refusal is a 429 with ``Retry-After``, on which the agent keeps the batch
    and retries it the next cycle (``monitoring.collectors.agent``)."""

    def __init__(self):
        self._wait = 0

    def allow_request(self, request, view) -> bool:
        token = token_of(request)
        samples = request.data.get("samples") if isinstance(request.data, dict) else None
        count = len(samples) if isinstance(samples, list) else 0
        if token is None or count == 0:
            return True
        limit = int(getattr(settings, "FAIRSHARE_GPU_INGEST_SAMPLES_PER_MINUTE", 600))
        now = _clock()
        key = f"ingest-samples:{token.pk}:{int(now // 60)}"
        cache.add(key, 0, 120)
        try:
            total = cache.incr(key, count)
        except ValueError:  # expired between add() and incr()
            cache.add(key, count, 120)
            total = count
        if total <= limit:
            return True
        cache.decr(key, count)
        self._wait = max(1, 60 - int(now % 60))
        return False

    def wait(self):
        return self._wait


class UsageSampleViewSet(viewsets.ReadOnlyModelViewSet):
    """Raw usage samples (allocated and pending requests per namespace) of visible teams."""

    queryset = UsageSample.objects.select_related("team")
    serializer_class = serializers.UsageSampleSerializer
    filterset_class = filtersets.UsageSampleFilterSet
    ordering_fields = ["taken_at", "namespace", "resource"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class CurrentUsageView(APIView):
    """Usage now per visible team (the latest collection): allocated and pending requests per
    resource in canonical quantities, a department's summed over its subtree. The same figures
    as the dashboard and the team page (``monitoring.usage.current_usage``). ``?team=<slug>``
    narrows to one team (404 for one the caller cannot see)."""

    @extend_schema(
        parameters=[OpenApiParameter("team", OpenApiTypes.STR, description="a team's slug")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        teams = Team.objects.visible_to(request.user).filter(active=True).order_by("slug")
        slug = request.query_params.get("team")
        if slug is not None:
            teams = teams.filter(slug=slug)
            if not teams.exists():
                raise NotFound({"team": [f"No such team: {slug}."]})
        usage = current_usage()
        rows = []
        for team in teams.only("pk", "slug", "parent_id"):
            figures = usage.of(team.pk)
            rows.append(
                {
                    "team": team.slug,
                    "allocated": canonical_amounts({r: v["allocated"] for r, v in figures.items()}),
                    "pending": canonical_amounts({r: v["pending"] for r, v in figures.items()}),
                }
            )
        return Response(
            {
                "taken_at": usage.taken_at.isoformat() if usage.taken_at else None,
                "results": rows,
            }
        )


class BudgetUseView(APIView):
    """Budget use this month per visible team's budget: allocated hours of the budgeted resource
    up to ``cutoff`` (the end of the newest rolled-up hour), the monthly budget and the percent.
    The figure the team page, Reports, the alerts and /metrics show
    (``monitoring.budgets.budget_use``). ``?team=<slug>`` narrows to one team (404 for one the
    caller cannot see)."""

    read_scopes = CHARGEBACK_SCOPES

    @extend_schema(
        parameters=[OpenApiParameter("team", OpenApiTypes.STR, description="a team's slug")],
        responses={200: serializers.BudgetUseReportSerializer},
    )
    def get(self, request):
        from django.utils import timezone

        from monitoring.budgets import budget_cutoff, budget_use
        from monitoring.units import month_start

        teams = Team.objects.visible_to(request.user)
        slug = request.query_params.get("team")
        if slug is not None:
            teams = teams.filter(slug=slug)
            if not teams.exists():
                raise NotFound({"team": [f"No such team: {slug}."]})
        now = timezone.now()
        uses = budget_use(now=now, teams=teams)
        first = uses[0].month_start if uses else month_start(now)
        cutoff = uses[0].cutoff if uses else budget_cutoff(now=now)
        return Response(
            {
                "month_start": first.isoformat(),
                "cutoff": cutoff.isoformat(),
                "results": [
                    {
                        "team": use.team.slug,
                        "resource": use.resource,
                        "unit": use.unit,
                        "month": f"{use.month_start:%Y-%m}",
                        "allocated_hours": format(use.allocated_hours, "f"),
                        "budget_hours": format(use.budget_hours, "f"),
                        "percent": format(use.percent, "f"),
                    }
                    for use in uses
                ],
            }
        )


class WorkloadViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Workloads (gangs, Volcano Jobs, pods grouped by owner) of visible teams in the newest
    collection, with why each waits (``wait_code``, ``wait_reason``)."""

    queryset = Workload.objects.none()  # for introspection; get_queryset() picks the collection
    serializer_class = serializers.WorkloadSerializer
    filterset_class = filtersets.WorkloadFilterSet
    ordering_fields = ["namespace", "name", "gpus", "created", "phase"]

    def get_queryset(self):
        return latest_workloads(self.request.user).select_related("team")

    def list(self, request, *args, **kwargs):
        """The page's workloads, each waiting one with what must change for it to start
        (``blockers``: computed for the page at once, a constant number of queries)."""
        from django.utils import timezone

        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(page if page is not None else queryset)
        found = workload_blockers(rows, now=timezone.now())
        context = self.get_serializer_context()
        context["blockers"] = {
            w.pk: blocker_dicts(found[w.pk], workload=w, team_slug=w.team.slug if w.team else "")
            for w in rows
            if w.pk in found
        }
        serializer = self.get_serializer_class()(rows, many=True, context=context)
        if page is not None:
            return self.get_paginated_response(serializer.data)
        return Response(serializer.data)


class WorkloadWaitsView(APIView):
    """How long workloads waited, per visible team and week (newest first): how many started,
    the median, 90th percentile and longest wait in seconds, from the workload records
    (``monitoring.workloads.team_waits``). ``?team=<slug>`` narrows to one team (404 for one
    the caller cannot see); ``?weeks=N`` (1-52, default 8) how far back."""

    @extend_schema(
        parameters=[
            OpenApiParameter("team", OpenApiTypes.STR, description="a team's slug"),
            OpenApiParameter("weeks", OpenApiTypes.INT, description="weeks back, 1-52"),
        ],
        responses={200: serializers.WorkloadWaitsSerializer},
    )
    def get(self, request):
        from django.utils import timezone
        from rest_framework.exceptions import ValidationError

        teams = Team.objects.visible_to(request.user).order_by("slug")
        slug = request.query_params.get("team")
        if slug is not None:
            teams = teams.filter(slug=slug)
            if not teams.exists():
                raise NotFound({"team": [f"No such team: {slug}."]})
        raw = request.query_params.get("weeks", "8")
        if not raw.isdigit() or not 1 <= int(raw) <= 52:
            raise ValidationError({"weeks": ["A whole number of weeks from 1 to 52."]})
        weeks = int(raw)
        rows = team_waits(teams.only("pk", "slug"), now=timezone.now(), weeks=weeks)
        return Response(
            {
                "weeks": weeks,
                "results": [
                    {
                        "team": row.team,
                        "week": row.week.isoformat(),
                        "started": row.started,
                        "median_wait_seconds": row.median_seconds,
                        "p90_wait_seconds": row.p90_seconds,
                        "longest_wait_seconds": row.longest_seconds,
                    }
                    for row in rows
                ],
            }
        )


class UsageRollupViewSet(viewsets.ReadOnlyModelViewSet):
    """Hourly and daily usage rollups of visible teams (``?period=hour|day``)."""

    queryset = UsageRollup.objects.select_related("team")
    serializer_class = serializers.UsageRollupSerializer
    filterset_class = filtersets.UsageRollupFilterSet
    read_scopes = CHARGEBACK_SCOPES
    ordering_fields = ["start", "namespace", "resource"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class GpuSampleViewSet(viewsets.ReadOnlyModelViewSet):
    """GPU readings of visible teams; node agents POST batches to ``ingest``."""

    queryset = GpuSample.objects.select_related("team")
    serializer_class = serializers.GpuSampleSerializer
    filterset_class = filtersets.GpuSampleFilterSet
    ordering_fields = ["taken_at", "node", "index"]

    @property
    def allow_node_agent(self) -> bool:
        return self.action == "ingest"

    @property
    def throttle_scope(self) -> str | None:
        return "ingest" if self.action == "ingest" else None

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)

    @extend_schema(
        request=serializers.IngestBatchSerializer,
        responses={200: serializers.IngestResultSerializer},
    )
    @action(
        detail=False,
        methods=["post"],
        permission_classes=with_defaults(IsNodeAgentToken),
        throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, IngestSampleThrottle],
    )
    def ingest(self, request):
        """Store one agent batch: node-agent tokens only, for their own node (400 otherwise)."""
        from monitoring.ingest import ingest_gpu_batch

        result = ingest_gpu_batch(token_node=request.auth.node, batch=request.data)
        return Response(asdict(result))


class CapacitySnapshotViewSet(viewsets.ReadOnlyModelViewSet):
    """Schedulable cluster capacity over time; ``latest`` is the one quotas are checked against."""

    queryset = CapacitySnapshot.objects.all()
    serializer_class = serializers.CapacitySnapshotSerializer
    filterset_class = filtersets.CapacitySnapshotFilterSet
    ordering_fields = ["taken_at"]

    @extend_schema(responses={200: serializers.CapacitySnapshotSerializer})
    @action(detail=False, methods=["get"])
    def latest(self, request):
        """The newest capacity record (404 before the first collection)."""
        snapshot = self.get_queryset().order_by("-taken_at", "-id").first()
        if snapshot is None:
            from django.http import Http404

            raise Http404("No capacity has been collected yet.")
        return Response(self.get_serializer(snapshot).data)


class RateCardViewSet(AuditedWriteMixin, viewsets.ModelViewSet):
    """Prices per unit-hour (GPU-, core-, GiB-hour); site admins write, rates may not overlap."""

    queryset = RateCard.objects.all()
    serializer_class = serializers.RateCardSerializer
    filterset_class = filtersets.RateCardFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    read_scopes = CHARGEBACK_SCOPES
    ordering_fields = ["resource", "valid_from"]

    def audit_team(self, instance):
        return None

    def check_write(self, instance) -> None:
        from django.core.exceptions import ValidationError

        if not instance.valid_from:
            return
        overlapping = RateCard.objects.filter(
            Q(valid_to__isnull=True) | Q(valid_to__gt=instance.valid_from),
            resource=instance.resource,
            flavor=instance.flavor,
        ).exclude(pk=instance.pk)
        if instance.valid_to is not None:
            overlapping = overlapping.filter(valid_from__lt=instance.valid_to)
        clash = overlapping.first()
        if clash is not None:
            raise ValidationError(
                {"valid_from": f"Overlaps rate #{clash.pk} ({clash}); end that one first."}
            )


_CHARGEBACK_PARAMS = [
    OpenApiParameter("start", OpenApiTypes.STR, required=True, description="Date or ISO time."),
    OpenApiParameter("end", OpenApiTypes.STR, required=True, description="Date or ISO time."),
    OpenApiParameter("group_by", OpenApiTypes.STR, description="e.g. team,resource"),
]


class ChargebackView(APIView):
    """Chargeback for [start, end): JSON, or CSV (``Accept: text/csv`` or ``?format=csv``).

    Admins and service tokens (``read:chargeback``/``read:all``) see every team; leads,
    members and viewers only their teams' rows.
    """

    renderer_classes = [SurrogateSafeJSONRenderer, ChargebackCSVRenderer]
    read_scopes = CHARGEBACK_SCOPES
    throttle_scope = "chargeback"

    @extend_schema(
        parameters=_CHARGEBACK_PARAMS,
        responses={
            200: OpenApiResponse(
                serializers.ChargebackReportSerializer,
                description=f"CSV columns: {', '.join(CSV_COLUMNS)}",
            )
        },
    )
    def get(self, request):
        query = serializers.ChargebackQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        result = chargeback.build_report(
            start=params["start"], end=params["end"], group_by=params["group_by"], user=request.user
        )
        data = {
            "start": result.report.start.isoformat(),
            "end": result.report.end.isoformat(),
            "group_by": list(result.report.group_by),
            "currency": result.currency,
            "columns": list(CSV_COLUMNS),
            "rows": result.rows(),
            "total": result.total_row(),
            "budgets": result.budget_rows(),
            "unpriced_records": result.report.total.unpriced_records,
        }
        response = Response(data)
        if request.accepted_renderer.format == "csv":
            name = f"chargeback-{params['start']:%Y%m%d}-{params['end']:%Y%m%d}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class ChargebackStatementViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Frozen monthly statements. POST (site admins) freezes a finished month; GET shows the
    frozen figures (rows of the teams you can see) and ``late`` changes since."""

    queryset = ChargebackStatement.objects.select_related("frozen_by")
    serializer_class = serializers.ChargebackStatementSerializer
    filterset_class = filtersets.ChargebackStatementFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    read_scopes = CHARGEBACK_SCOPES
    throttle_scope = "chargeback"
    ordering_fields = ["start", "frozen_at"]

    def get_queryset(self):
        """Every statement for admins and service tokens; for people, only while they can see
        a team (an outsider's list is empty and every statement 404: issue 27)."""
        queryset = super().get_queryset()
        user = self.request.user
        token = token_of(self.request)
        if is_site_admin(user) or (token is not None and token.kind == ApiToken.Kind.SERVICE):
            return queryset
        if not Team.objects.visible_to(user).exists():
            return queryset.none()
        return queryset

    def _detail(self, statement) -> dict:
        base = serializers.ChargebackStatementSerializer(
            statement, context=self.get_serializer_context()
        ).data
        return dict(base) | chargeback.statement_view(statement, user=self.request.user)

    @extend_schema(responses={200: serializers.ChargebackStatementDetailSerializer})
    def retrieve(self, request, pk=None):
        return Response(self._detail(self.get_object()))

    @extend_schema(
        request=serializers.StatementCreateSerializer,
        responses={201: serializers.ChargebackStatementDetailSerializer},
    )
    def create(self, request):
        body = serializers.StatementCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        statement = chargeback.freeze_month(
            month=body.validated_data["month"],
            group_by=body.validated_data["group_by"],
            actor=request.user,
        )
        return Response(self._detail(statement), status=status.HTTP_201_CREATED)
