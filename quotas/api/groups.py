"""REST endpoints for identity-provider groups (site admins only): the group → team/role rules
with a preview of who each matches, and the groups a team's RoleBindings bind. Writes go
through ``quotas.groups`` (audited, validated, one transaction)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from config.api import StrictCharField, StrictModelSerializer
from quotas.api.permissions import IsSiteAdmin, with_defaults
from quotas.groups import (
    add_cluster_group,
    create_rule,
    delete_rule,
    preview_rule,
    remove_cluster_group,
)
from quotas.models import GroupRule, Team, TeamClusterGroup


class GroupMatchSerializer(serializers.Serializer):
    username = serializers.CharField()
    groups = serializers.ListField(child=serializers.CharField())


class GroupRuleSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.filter(active=True),
        required=False,
        allow_null=True,
    )

    class Meta:
        model = GroupRule
        fields = ["id", "pattern", "team", "role", "site_admin", "created", "updated"]
        read_only_fields = ["id", "created", "updated"]
        validators = []  # shape only: the service's full_clean() checks the constraints


class GroupPreviewSerializer(serializers.Serializer):
    pattern = StrictCharField(max_length=255)


class GroupRuleViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Group → team and role (or site admin) rules; applied at every single sign-on."""

    queryset = GroupRule.objects.select_related("team")
    serializer_class = GroupRuleSerializer
    permission_classes = with_defaults(IsSiteAdmin)
    filterset_fields = ["team__slug", "site_admin"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = create_rule(
            pattern=data["pattern"],
            team=data.get("team"),
            role=data.get("role", ""),
            site_admin=data.get("site_admin", False),
            actor=self.request.user,
        )

    def perform_destroy(self, instance):
        delete_rule(instance.pk, actor=self.request.user)

    @extend_schema(responses=GroupMatchSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def matches(self, request, pk=None):
        """Who this rule matches: users whose groups at their last sign-in match it."""
        return Response(preview_rule(self.get_object().pattern))

    @extend_schema(request=GroupPreviewSerializer, responses=GroupMatchSerializer(many=True))
    @action(detail=False, methods=["post"], pagination_class=None, filter_backends=[])
    def preview(self, request):
        """Who a rule with this pattern would match, before it is saved."""
        body = GroupPreviewSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(preview_rule(body.validated_data["pattern"]), status=status.HTTP_200_OK)


class TeamClusterGroupSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(
        slug_field="slug", queryset=Team.objects.filter(active=True)
    )

    class Meta:
        model = TeamClusterGroup
        fields = ["id", "team", "group", "role", "created", "updated"]
        read_only_fields = ["id", "created", "updated"]
        validators = []


class TeamClusterGroupViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Identity-provider groups bound in a team's RoleBindings (with the API server's prefix)."""

    queryset = TeamClusterGroup.objects.select_related("team")
    serializer_class = TeamClusterGroupSerializer
    permission_classes = with_defaults(IsSiteAdmin)
    filterset_fields = ["team__slug"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = add_cluster_group(
            data["team"], group=data["group"], role=data["role"], actor=self.request.user
        )

    def perform_destroy(self, instance):
        remove_cluster_group(instance.pk, actor=self.request.user)
