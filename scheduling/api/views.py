"""REST API of the scheduling app: fair-share snapshots (current and history) and cluster syncs."""

from __future__ import annotations

from django.db.models import Subquery
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from quotas.access import get_team_for_user
from quotas.api.permissions import IsSiteAdmin, with_defaults
from scheduling.api import filtersets, serializers
from scheduling.api.history import ShareHistoryQuerySerializer, ShareHistorySerializer
from scheduling.history import share_history
from scheduling.models import ShareComputation, ShareSnapshot, SyncItem, SyncRun
from scheduling.visibility import sees_every_share


class ShareSnapshotViewSet(viewsets.ReadOnlyModelViewSet):
    """Dominant shares and DRF fair allocations: ``current`` (the latest computation) and the
    history (filter by ``team`` and ``computed_after``/``_before``). Whose teams depends on
    ``FAIRSHARE_SHARE_VISIBILITY`` (scheduling.visibility): the teams you can see (``own``, the
    default) or every team (``all``)."""

    queryset = ShareSnapshot.objects.select_related("team")
    serializer_class = serializers.ShareSnapshotSerializer
    filterset_class = filtersets.ShareSnapshotFilterSet
    ordering_fields = ["computed_at", "dominant_share", "weighted_share"]

    def get_queryset(self):
        queryset, user = super().get_queryset(), self.request.user
        if sees_every_share(user):
            return queryset
        return queryset.visible_to(user)

    @extend_schema(responses=serializers.ShareSnapshotSerializer(many=True))
    @action(detail=False, methods=["get"])
    def current(self, request):
        """Snapshots of the latest computation (empty before the first one)."""
        latest = ShareComputation.objects.order_by("-computed_at", "-id").values("id")[:1]
        queryset = self.filter_queryset(self.get_queryset().filter(computation=Subquery(latest)))
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


class ShareHistoryView(APIView):
    """A team's fair allocation, usage and decayed usage over the last ``days`` days (1 to 30),
    one point an hour: the hour's last share computation (``scheduling.history``). A
    department's figures are its subtree's. The teams whose page you can open (404 for others,
    as the team endpoints answer), whatever ``FAIRSHARE_SHARE_VISIBILITY`` says."""

    @extend_schema(
        parameters=[
            OpenApiParameter("slug", OpenApiTypes.STR, OpenApiParameter.PATH),
            ShareHistoryQuerySerializer,
        ],
        responses={200: ShareHistorySerializer},
    )
    def get(self, request, slug: str):
        team, _ = get_team_for_user(request.user, slug)
        query = ShareHistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        history = share_history(team, days=query.validated_data["days"])
        body = {
            "team": team.slug,
            "days": history.days,
            "start": history.start,
            "end": history.end,
            "computed_at": history.computed_at,
            "resources": history.resources,
        }
        return Response(ShareHistorySerializer(body).data)


class SyncRunViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Cluster sync runs (site admins). POST starts one and answers 202 with its URL; poll it."""

    queryset = SyncRun.objects.select_related("requested_by").prefetch_related("quota_requests")
    serializer_class = serializers.SyncRunSerializer
    filterset_class = filtersets.SyncRunFilterSet
    permission_classes = with_defaults(IsSiteAdmin)
    ordering_fields = ["created", "finished_at"]

    @extend_schema(
        request=serializers.SyncRunCreateSerializer,
        responses={202: OpenApiResponse(serializers.SyncRunAcceptedSerializer)},
    )
    def create(self, request):
        from scheduling.sync import start_sync

        body = serializers.SyncRunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = start_sync(
            dry_run=body.validated_data["dry_run"], trigger="api", requested_by=request.user
        )
        url = request.build_absolute_uri(reverse("scheduling-api:syncrun-detail", args=[run.pk]))
        return Response(
            {"id": run.pk, "status": run.status, "url": url},
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": url},
        )


class SyncItemViewSet(viewsets.ReadOnlyModelViewSet):
    """What each sync run did to each object (site admins); filter by ``run``."""

    queryset = SyncItem.objects.all()
    serializer_class = serializers.SyncItemSerializer
    filterset_class = filtersets.SyncItemFilterSet
    permission_classes = with_defaults(IsSiteAdmin)
    ordering_fields = ["id", "kind", "action"]
