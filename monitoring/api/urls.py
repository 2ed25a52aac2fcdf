from django.urls import path
from rest_framework.routers import SimpleRouter

from monitoring.api import views

app_name = "monitoring-api"

router = SimpleRouter()
router.register("usage-samples", views.UsageSampleViewSet)
router.register("usage-rollups", views.UsageRollupViewSet)
router.register("gpu-samples", views.GpuSampleViewSet)
router.register("capacity", views.CapacitySnapshotViewSet)
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("rate-cards", views.RateCardViewSet)
router.register("chargeback/statements", views.ChargebackStatementViewSet)

urlpatterns = [
    path("chargeback/", views.ChargebackView.as_view(), name="chargeback"),
    path("usage/current/", views.CurrentUsageView.as_view(), name="usage-current"),
    path("budget-use/", views.BudgetUseView.as_view(), name="budget-use"),
    path("workload-waits/", views.WorkloadWaitsView.as_view(), name="workload-waits"),
    *router.urls,
]
