from rest_framework.routers import SimpleRouter

from quotas.api import groups, views

app_name = "quotas-api"

router = SimpleRouter()
router.register("teams", views.TeamViewSet)
router.register("namespaces", views.NamespaceViewSet)
router.register("memberships", views.MembershipViewSet)
router.register("quotas", views.TeamQuotaViewSet)
router.register("priority-tiers", views.PriorityTierViewSet)
router.register("quota-requests", views.QuotaRequestViewSet)
router.register("budgets", views.BudgetViewSet)
router.register("audit-events", views.AuditEventViewSet)
router.register("transitions", views.TransitionViewSet)
router.register("tokens", views.PersonalTokenViewSet, basename="token")
router.register("service-tokens", views.ServiceTokenViewSet, basename="servicetoken")
router.register("group-rules", groups.GroupRuleViewSet)
router.register("cluster-groups", groups.TeamClusterGroupViewSet)

urlpatterns = router.urls
