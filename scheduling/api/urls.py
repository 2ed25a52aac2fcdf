from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.api import views

app_name = "scheduling-api"

router = SimpleRouter()
router.register("share-snapshots", views.ShareSnapshotViewSet)
router.register("sync-runs", views.SyncRunViewSet)
router.register("sync-items", views.SyncItemViewSet)

urlpatterns = [
    path(
        "teams/<str:slug>/share-history/",
        views.ShareHistoryView.as_view(),
        name="team-share-history",
    ),
    *router.urls,
]
