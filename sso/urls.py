from django.urls import path

from sso import admin_views, views

app_name = "sso"

urlpatterns = [
    path("sso/login/", views.start, name="start"),
    path("sso/callback/", views.callback, name="callback"),
    path("sso/groups/", admin_views.group_rules, name="group_rules"),
    path("sso/groups/<int:pk>/delete/", admin_views.group_rule_delete, name="group_rule_delete"),
    path(
        "sso/cluster-groups/<int:pk>/delete/",
        admin_views.cluster_group_delete,
        name="cluster_group_delete",
    ),
]
