"""The request a signed-in person's view receives."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest


class AuthenticatedHttpRequest(HttpRequest):
    """A request that got past `login_required` or the admin's login: its user is a User,
    never AnonymousUser. A type for annotations only; Django builds the request itself."""

    user: User
