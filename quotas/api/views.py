"""REST API of the quotas app: tenancy, quota requests and their decisions, budgets, audit, tokens.

Every ``get_queryset`` starts from ``visible_to(request.user)``, so an outsider's detail request
is a 404. Writes go through the services (requests, quotas, tokens) or AuditedWriteMixin
(full_clean + AuditEvent) for simple models.
"""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from config.api import ConditionalRetrieveMixin
from quotas import decisions, direct, members, tokens, transitions
from quotas.api import filtersets, serializers
from quotas.api.authentication import token_of
from quotas.api.mixins import AuditedWriteMixin, WarningsMixin
from quotas.api.permissions import IsSiteAdmin, IsSiteAdminOrReadOnly, with_defaults
from quotas.models import (
    ApiToken,
    AuditEvent,
    Budget,
    Membership,
    Namespace,
    PriorityTier,
    QuotaRequest,
    Team,
    TeamQuota,
    Transition,
)
from quotas.querysets import is_site_admin
from quotas.signals import quota_changed
from quotas.tiers import team_tier_notice, tier_value_notice

READ_ALL = ("read:all",)


class TeamViewSet(
    WarningsMixin, ConditionalRetrieveMixin, AuditedWriteMixin, viewsets.ModelViewSet
):
    """Teams (and departments) the user can see; site admins create and change them."""

    queryset = Team.objects.select_related("parent", "tier")
    serializer_class = serializers.TeamSerializer
    filterset_class = filtersets.TeamFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    lookup_field = "slug"
    ordering_fields = ["slug", "name", "weight", "updated"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)

    def audit_team(self, instance):
        return instance

    def perform_update(self, serializer):
        # Recorded on any transition the change starts (quotas.transitions).
        serializer.instance._changed_by = self.request.user
        super().perform_update(serializer)

    def after_write(self, instance, before):
        if before is not None and before.get("tier") != instance.tier_id:
            old = PriorityTier.objects.filter(pk=before.get("tier")).first()
            self.notices.append(
                team_tier_notice(
                    instance.slug, old and old.name, instance.tier and instance.tier.name
                )
            )
        # Weights and tiers feed the fair-share computation and the rendered queues.
        # A move (issue 25) syncs the department it left and the one it joined as well.
        fields = {"weight": "weight", "tier": "tier_id", "reclaimable": "reclaimable"}
        fields |= {"active": "active", "parent": "parent_id"}
        if before is None or any(before.get(k) != getattr(instance, a) for k, a in fields.items()):
            old_parent = before.get("parent") if before else None
            ids = [i for i in (instance.pk, old_parent, instance.parent_id) if i]
            transaction.on_commit(
                lambda: quota_changed.send(sender=Team, team_ids=ids, reason="team")
            )


class NamespaceViewSet(ConditionalRetrieveMixin, AuditedWriteMixin, viewsets.ModelViewSet):
    """Kubernetes namespaces of visible teams; site admins assign them."""

    queryset = Namespace.objects.select_related("team")
    serializer_class = serializers.NamespaceSerializer
    filterset_class = filtersets.NamespaceFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    ordering_fields = ["name", "updated"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class MembershipViewSet(ConditionalRetrieveMixin, viewsets.ModelViewSet):
    """Members of visible teams; leads (and admins) add, re-role and remove their team's members.

    Every write goes through ``quotas.members``, as the team page's forms do: the same
    permission and last-lead rules, one AuditEvent, and a cluster sync after commit (members
    become RoleBindings).
    """

    queryset = Membership.objects.select_related("team", "user")
    serializer_class = serializers.MembershipSerializer
    filterset_class = filtersets.MembershipFilterSet
    ordering_fields = ["user__username", "role", "updated"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)

    def get_serializer_class(self):
        if self.action == "partial_update":
            return serializers.MembershipUpdateSerializer
        return super().get_serializer_class()

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = members.add_member(
            data["team"], username=data["user"], role=data["role"], actor=self.request.user
        )

    def perform_update(self, serializer):
        membership = serializer.instance
        role = serializer.validated_data.get("role", membership.role)
        serializer.instance = members.change_role(
            membership.team, membership.pk, role=role, actor=self.request.user
        )

    def perform_destroy(self, instance):
        members.remove_member(instance.team, instance.pk, actor=self.request.user)


class TeamQuotaViewSet(ConditionalRetrieveMixin, viewsets.ModelViewSet):
    """Quotas of visible teams; site admins set them directly (capacity re-checked, audited)."""

    queryset = TeamQuota.objects.select_related("team")
    serializer_class = serializers.TeamQuotaSerializer
    filterset_class = filtersets.TeamQuotaFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    ordering_fields = ["resource", "updated"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)

    def get_serializer_class(self):
        if self.action == "partial_update":
            return serializers.TeamQuotaUpdateSerializer
        return super().get_serializer_class()

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = direct.set_team_quota(
            data["team"],
            data["resource"],
            guarantee=data["guarantee"],
            limit=data.get("limit"),
            actor=self.request.user,
            note=data.get("note", ""),
        )

    def perform_update(self, serializer):
        quota, data = serializer.instance, serializer.validated_data
        serializer.instance = direct.set_team_quota(
            quota.team,
            quota.resource,
            guarantee=data.get("guarantee", quota.guarantee),
            limit=data.get("limit", quota.limit),
            actor=self.request.user,
            note=data.get("note", ""),
        )


class PriorityTierViewSet(
    WarningsMixin, ConditionalRetrieveMixin, AuditedWriteMixin, viewsets.ModelViewSet
):
    """Priority tiers (PriorityClasses): everyone reads, site admins write."""

    queryset = PriorityTier.objects.all()
    serializer_class = serializers.PriorityTierSerializer
    filterset_class = filtersets.PriorityTierFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    ordering_fields = ["name", "value", "updated"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def audit_team(self, instance):
        return None

    def after_write(self, instance, before):
        self.notices.append(
            tier_value_notice(before, instance.name, instance.value, instance.preemption_policy)
        )


@extend_schema_view(
    approve=extend_schema(request=serializers.ApproveSerializer),
    reject=extend_schema(request=serializers.RejectSerializer),
    withdraw=extend_schema(request=None),
)
class QuotaRequestViewSet(
    ConditionalRetrieveMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Quota requests: leads submit and withdraw, site admins approve (optionally adjusted) or
    reject. Every transition goes through quotas.decisions."""

    queryset = QuotaRequest.objects.select_related("team", "requester", "decided_by")
    serializer_class = serializers.QuotaRequestSerializer
    filterset_class = filtersets.QuotaRequestFilterSet
    ordering_fields = ["created", "updated", "status"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user).prefetch_related("lines")

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = decisions.submit_request(
            team=data["team"],
            requester=self.request.user,
            lines=[
                {
                    "resource": line["resource"],
                    "guarantee": line["guarantee"],
                    "limit": line["limit"],
                }
                for line in data["lines"]
            ],
            justification=data.get("justification", ""),
            window_start=data.get("window_start"),
            window_end=data.get("window_end"),
        )

    def _answer(self, request_obj) -> Response:
        fresh = self.get_queryset().get(pk=request_obj.pk)
        return Response(self.get_serializer(fresh).data)

    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """Withdraw a pending request (its requester, the team's leads or admins)."""
        obj = self.get_object()
        return self._answer(decisions.withdraw_request(obj.pk, actor=request.user))

    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve (site admins), optionally with adjusted amounts; 409 if not pending, 400 naming
        the resource if capacity would be exceeded."""
        obj = self.get_object()
        body = serializers.ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        adjustments = {
            resource: (amounts["guarantee"], amounts["limit"])
            for resource, amounts in body.validated_data["adjustments"].items()
        }
        approved = decisions.approve_request(
            obj.pk,
            approver=request.user,
            note=body.validated_data["note"],
            adjustments=adjustments,
        )
        return self._answer(approved)

    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject (site admins) with a reason."""
        obj = self.get_object()
        body = serializers.RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._answer(
            decisions.reject_request(
                obj.pk, approver=request.user, note=body.validated_data["note"]
            )
        )


class BudgetViewSet(ConditionalRetrieveMixin, AuditedWriteMixin, viewsets.ModelViewSet):
    """Monthly resource-hour budgets of visible teams; site admins set them."""

    queryset = Budget.objects.select_related("team")
    serializer_class = serializers.BudgetSerializer
    filterset_class = filtersets.BudgetFilterSet
    permission_classes = with_defaults(IsSiteAdminOrReadOnly)
    read_scopes = ("read:chargeback",)
    ordering_fields = ["resource", "monthly_hours", "updated"]

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit trail: site admins see everything, leads their teams' events, others nothing."""

    queryset = AuditEvent.objects.select_related("team")
    serializer_class = serializers.AuditEventSerializer
    filterset_class = filtersets.AuditEventFilterSet
    ordering_fields = ["created"]

    def get_queryset(self):
        user = self.request.user
        queryset = super().get_queryset().visible_to(user)
        if is_site_admin(user):
            return queryset
        return queryset.filter(team__in=Team.objects.led_by(user))


class TransitionViewSet(viewsets.ReadOnlyModelViewSet):
    """Transitions of visible teams: what waits, for what, since when (``?state=waiting``);
    site admins cancel a waiting one, which restores the team as it was (409 when it is not
    waiting, 403 for anyone else)."""

    queryset = Transition.objects.select_related("team", "started_by")
    serializer_class = serializers.TransitionSerializer
    ordering_fields = ["since"]

    def get_queryset(self):
        queryset = super().get_queryset().visible_to(self.request.user)
        state = self.request.query_params.get("state")
        return queryset.filter(state=state) if state else queryset

    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a waiting transition (site admins)."""
        obj = self.get_object()
        cancelled = transitions.cancel_transition(obj.pk, actor=request.user)
        return Response(serializers.TransitionSerializer(cancelled).data)


class _TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Tokens are for people: service and node-agent tokens cannot list or read them, and no
    token can create one (quotas.tokens refuses ``via_token``)."""

    serializer_class = serializers.ApiTokenSerializer
    filterset_class = filtersets.ApiTokenFilterSet
    ordering_fields = ["created", "last_used_at", "name"]
    people_only = True

    def _issue(self, **kwargs) -> Response:
        issued = tokens.issue_token(
            actor=self.request.user, via_token=token_of(self.request), **kwargs
        )
        data = dict(serializers.ApiTokenSerializer(issued.token).data, token=issued.raw)
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Revoke the token (idempotent); it stops working at once."""
        token = tokens.revoke_token(self.get_object().pk, actor=request.user)
        return Response(serializers.ApiTokenSerializer(token).data)


class PersonalTokenViewSet(_TokenViewSet):
    """Your personal tokens: create (the secret is in that one response), list, revoke."""

    queryset = ApiToken.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user, kind=ApiToken.Kind.PERSONAL)

    @extend_schema(
        request=serializers.PersonalTokenCreateSerializer,
        responses={201: OpenApiResponse(serializers.IssuedTokenSerializer)},
    )
    def create(self, request):
        body = serializers.PersonalTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._issue(owner=request.user, **body.validated_data)


class ServiceTokenViewSet(_TokenViewSet):
    """Service (scoped, read-only) and node-agent tokens: site admins only."""

    permission_classes = with_defaults(IsSiteAdmin)

    def get_queryset(self):
        return ApiToken.objects.exclude(kind=ApiToken.Kind.PERSONAL).select_related("user")

    @extend_schema(
        request=serializers.ServiceTokenCreateSerializer,
        responses={201: OpenApiResponse(serializers.IssuedTokenSerializer)},
    )
    def create(self, request):
        body = serializers.ServiceTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._issue(owner=request.user, **body.validated_data)
