"""The Django app that carries the inbox table's migration and the purge command."""

from django.apps import AppConfig


class InletInboxConfig(AppConfig):
    # The module is inlet_inbox.django; its default label would be "django".
    name = "inlet_inbox.django"
    label = "inlet_inbox"
    verbose_name = "Inlet inbox"
