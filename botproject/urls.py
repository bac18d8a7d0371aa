from __future__ import annotations

from django.conf import settings
from django.conf.urls.static import static
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(template_name="registration/login.html"),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("metrics", metrics, name="metrics"),
    path("", include("accounts.urls")),
    path("", include("dashboard.urls")),
    # Uploaded avatars, in development only (DEBUG); production serves MEDIA_ROOT elsewhere.
    *static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT),
]
