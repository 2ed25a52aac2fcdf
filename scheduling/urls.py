from django.urls import path

from scheduling import views

app_name = "scheduling"

urlpatterns = [
    path("sync/", views.syncrun_list, name="syncrun_list"),
    path("sync/start/", views.sync_start, name="sync_start"),
    path("sync/<int:pk>/", views.syncrun_detail, name="syncrun"),
    path("sync/<int:pk>/progress/", views.syncrun_progress, name="syncrun_progress"),
]
