from django.urls import path

from monitoring import reports, views

app_name = "monitoring"

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("reports/", reports.reports, name="reports"),
    path("reports/chargeback.csv", reports.reports_csv, name="reports_csv"),
]
