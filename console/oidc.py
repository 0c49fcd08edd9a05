"""Company sign-in with OpenID Connect: mozilla-django-oidc's code flow, with Gatehouse's rules.

- The id_token must be signed by the provider's key (its JWKS), for this client (`aud`), by
  this issuer (`iss`), and not expired: the library checks the signature and `exp` but not
  `aud` or `iss`, so `get_payload_data` checks them all.
- The account is found by username (a configurable claim, e-mail when the token has none),
  never by e-mail alone, so an address shared with a local account takes nothing over. A
  superuser never signs in this way: the break-glass administrator uses a local password.
- At each sign-in the Gatehouse groups named in the role map are set to exactly the ones the
  provider's groups map to; groups the map does not name are left alone. A change is written
  to the audit trail.
- A refused sign-in (a bad token, an unreachable provider, the person cancelled) ends on the
  login page with a message, never an error page; the reason goes to the log.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import Group, User
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from audit.models import AuditAction
from audit.services import audit_record

logger = logging.getLogger(__name__)

REFUSED = (
    "Signing in with your company account did not work. Try again; if it keeps failing, "
    "ask whoever runs Gatehouse (the reason is in its log)."
)


def provider_groups(claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of names (a provider may send one group as a string)."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        value = [value]
    return [str(name) for name in value if isinstance(name, str | int)]


def user_roles_follow_provider(*, user: User, groups: list[str], created: bool) -> None:
    """Give `user` exactly the mapped Gatehouse groups of the provider's `groups`, among the
    groups the role map names (any other group stays as it is), and audit a change."""
    role_map: dict[str, str] = settings.OIDC_ROLE_MAP
    managed = set(role_map.values())
    wanted = {role_map[name] for name in groups if name in role_map}
    with transaction.atomic():
        # Two sign-ins of one person at once would each compute the change from the same
        # start and write it twice: the row lock makes the second one see the first's groups.
        User.objects.select_for_update().filter(pk=user.pk).get()
        current = set(user.groups.filter(name__in=managed).values_list("name", flat=True))
        known = {group.name: group for group in Group.objects.filter(name__in=wanted | current)}
        missing = wanted - set(known)
        if missing:
            logger.warning("OIDC role map names groups that do not exist: %s", sorted(missing))
        added = sorted((wanted - current) & set(known))
        removed = sorted(current - wanted)
        if not (added or removed or created):
            return
        user.groups.remove(*(known[name] for name in removed))
        user.groups.add(*(known[name] for name in added))
        audit_record(
            action=AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER,
            actor=user,
            created=created,
            added=added,
            removed=removed,
            provider_groups=sorted(groups),
        )


class CompanySignInBackend(OIDCAuthenticationBackend):
    """Signs in through the company's identity provider; authenticates nobody while it is
    not configured, and never answers a password login."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce: a password login never reaches the provider.
        if not settings.OIDC_ENABLED or request is None or "nonce" not in kwargs:
            return None
        try:
            user: User | None = super().authenticate(request, **kwargs)
        except (SuspiciousOperation, jwt.InvalidTokenError, requests.RequestException) as exc:
            logger.warning("company sign-in refused: %s", exc)
            return None
        return user

    def get_payload_data(self, token: bytes | str, key: Any) -> dict[str, Any]:
        payload: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[self.OIDC_RP_SIGN_ALGO],
            audience=self.OIDC_RP_CLIENT_ID,
            issuer=settings.OIDC_ISSUER,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The id_token's claims with the userinfo endpoint's over them: a provider may put
        the groups in either. Both must be about the same subject."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo is about another subject than the id_token")
        return {**payload, **userinfo}

    def username_from(self, claims: dict[str, Any]) -> str:
        username = claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email") or ""
        return str(username).strip()[:150]

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(self.username_from(claims))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return User.objects.filter(username=self.username_from(claims), is_superuser=False)

    def describe_user_by_claims(self, claims: dict[str, Any]) -> str:
        return f"username {self.username_from(claims)}"

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        # The account, its e-mail and its groups change together or not at all.
        with transaction.atomic():
            return super().get_or_create_user(access_token, id_token, payload)

    def create_user(self, claims: dict[str, Any]) -> User:
        username = self.username_from(claims)
        if User.objects.filter(username=username).exists():
            # A superuser of that name: a local account the provider may not sign in as.
            raise SuspiciousOperation(f"{username} is a local administrator account")
        # No usable password: this person signs in only through the provider.
        user = User.objects.create_user(username, email=str(claims.get("email") or ""))
        user_roles_follow_provider(user=user, groups=provider_groups(claims), created=True)
        return user

    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        email = str(claims.get("email") or "")
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        user_roles_follow_provider(user=user, groups=provider_groups(claims), created=False)
        return user


class SignInView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off (404) unless company sign-in is configured."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404
        return super().dispatch(request, *args, **kwargs)


class CallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: off (404) unless company sign-in is configured; a refusal ends on the
    login page with a message."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404
        return super().dispatch(request, *args, **kwargs)

    @property
    def failure_url(self) -> str:
        return reverse(settings.LOGIN_REDIRECT_URL_FAILURE)

    def login_failure(self) -> HttpResponse:
        messages.error(self.request, REFUSED)
        return HttpResponseRedirect(self.failure_url)
