from django.urls import path
from payments.views import receive

urlpatterns = [path("webhooks/inlet", receive)]
