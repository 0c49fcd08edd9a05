"""Company sign-in with OpenID Connect: mozilla-django-oidc's code flow, with Gatehouse's rules.

- The id_token must be signed by the provider's key (its JWKS), for this client (`aud`), by
  this issuer (`iss`), and not expired: the library checks the signature and `exp` but not
  `aud` or `iss`, so `get_payload_data` checks them all.
- The claims are checked as a local form would check them: the username (a configurable
  claim, the e-mail when the token has none) by Django's username validator, the e-mail by
  its EmailValidator, neither with a line break or another control character.
- The account is found by the provider's identity, its issuer and the person's `sub`
  (`CompanyIdentity`), never by e-mail. Only the first sign-in of an identity looks for a
  username: it makes a new account (with no usable password), or links one that has no
  usable password and no identity yet; it never takes an account that signs in with its own
  password, nor one linked to another identity. A superuser never signs in this way: the
  break-glass administrator uses a local password.
- The signing key is the JWKS key the id_token's `kid` names; a token without `kid` is
  checked with the provider's only key, and refused when the JWKS has several.
- At each sign-in the Gatehouse groups that are mapped (a team's sign-in groups, set on its
  page in the console, and the role map of the settings) are set to exactly the ones the
  provider's groups map to; groups nothing maps are left alone. A change is written
  to the audit trail.
- A refused sign-in (a bad token, an unreachable provider, the person cancelled, claims that
  are refused, an account that is not the provider's to sign in as) ends on the login page
  with a message saying what to do, never an error page; the reason goes to the log.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import Group, User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from accounts.models import CompanyIdentity
from accounts.selectors import teams_by_provider_group
from audit.models import AuditAction
from audit.services import audit_record

logger = logging.getLogger(__name__)

REFUSED = (
    "Signing in with your company account did not work. Try again; if it keeps failing, "
    "ask whoever runs Gatehouse (the reason is in its log)."
)
BAD_CLAIMS = (
    "Your company account sent a username or e-mail address Gatehouse cannot use (only "
    "letters, digits and @ . + - _ in a username of at most 150 characters, and one valid "
    "address). Ask whoever runs your company accounts or Gatehouse."
)
LOCAL_ACCOUNT = (
    "There is already a Gatehouse account named {username} that signs in with its own "
    "password, so your company account cannot sign in as it. Sign in with that password, or "
    "ask whoever runs Gatehouse to link the two (they turn off the account's password; your "
    "next company sign-in then links it)."
)
LINKED_ELSEWHERE = (
    "The Gatehouse account named {username} belongs to another company account, so yours "
    "cannot sign in as it. Ask whoever runs Gatehouse."
)
ADMINISTRATOR = (
    "{username} is a Gatehouse administrator account: it signs in only with its own password."
)
# Where the backend leaves the message the login page shows (the session: the backend and the
# callback view share nothing else).
REFUSAL_KEY = "company_sign_in_refused"
USERNAME_LENGTH = 150
IDENTITY_LENGTH = 255  # CompanyIdentity.issuer and .subject; OIDC's `sub` is at most 255


class SignInRefused(SuspiciousOperation):
    """A sign-in refused for a reason the person can act on: `shown` is said on the login
    page. A SuspiciousOperation, so mozilla-django-oidc ends the sign-in as for a bad token."""

    def __init__(self, reason: str, *, shown: str = REFUSED) -> None:
        super().__init__(reason)
        self.shown = shown


def _printable(value: str) -> None:
    if not value.isprintable():
        raise ValidationError("a line break or another control character")


def claimed_account(claims: dict[str, Any]) -> tuple[str, str]:
    """The username and e-mail address the provider claims, checked as a local account's
    would be; SignInRefused when either is not one Gatehouse could have made."""
    raw = claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email") or ""
    email = claims.get("email") or ""
    if not isinstance(raw, str) or not isinstance(email, str) or not raw:
        raise SignInRefused("the username or e-mail claim is missing or not text", shown=BAD_CLAIMS)
    username = User.normalize_username(raw)
    try:
        _printable(username)
        UnicodeUsernameValidator()(username)
        if len(username) > USERNAME_LENGTH:
            raise ValidationError("longer than 150 characters")
        if email:
            _printable(email)
            EmailValidator()(email)
    except ValidationError as exc:
        raise SignInRefused(
            f"claims refused ({'; '.join(exc.messages)}): "
            f"username {raw[:200]!r}, e-mail {email[:200]!r}",
            shown=BAD_CLAIMS,
        ) from exc
    return username, email


def provider_groups(claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of names (a provider may send one group as a string)."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        value = [value]
    return [str(name) for name in value if isinstance(name, str | int)]


def provider_map() -> dict[str, set[str]]:
    """Each provider group and the Gatehouse groups it maps to: the teams' own sign-in groups
    (edited on a team's page) and the deployment's role map (GATEHOUSE_OIDC_ROLE_MAP)."""
    found = teams_by_provider_group()
    role_map: dict[str, str] = settings.OIDC_ROLE_MAP
    for provider_group, name in role_map.items():
        found.setdefault(provider_group, set()).add(name)
    return found


def user_roles_follow_provider(*, user: User, groups: list[str], created: bool) -> None:
    """Give `user` exactly the mapped Gatehouse groups of the provider's `groups`, among the
    groups a team's sign-in groups or the role map name (any other group stays as it is), and
    audit a change."""
    mapping = provider_map()
    managed = set().union(*mapping.values())
    wanted = set().union(*(mapping[name] for name in groups if name in mapping))
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
        except (SuspiciousOperation, jwt.PyJWTError, requests.RequestException) as exc:
            logger.warning("company sign-in refused: %s", exc)
            return None
        return user

    def refused(self, exc: SignInRefused) -> SignInRefused:
        """`exc`, with its message left for the login page."""
        if exc.shown != REFUSED:
            self.request.session[REFUSAL_KEY] = exc.shown
        return exc

    def retrieve_matching_jwk(self, token: bytes | str) -> jwt.PyJWK:
        """The provider's key for this id_token: the one its `kid` names, of its algorithm.
        A token without `kid` is checked with the only key the JWKS holds: with several,
        which one signed is unknown, and it is refused (the library's own lookup failed with
        a KeyError, an error page)."""
        header = jwt.get_unverified_header(token)
        answer = requests.get(
            self.OIDC_OP_JWKS_ENDPOINT,
            verify=self.get_settings("OIDC_VERIFY_SSL", True),
            timeout=self.get_settings("OIDC_TIMEOUT", None),
            proxies=self.get_settings("OIDC_PROXY", None),
        )
        answer.raise_for_status()
        jwks = answer.json()
        keys = jwks.get("keys") if isinstance(jwks, dict) else None
        if not isinstance(keys, list) or not all(isinstance(key, dict) for key in keys):
            raise SuspiciousOperation("the provider's JWKS is not a list of keys")
        alg = header.get("alg")
        kid = header.get("kid")
        if kid is None and len(keys) != 1:
            raise SuspiciousOperation(
                f"the id_token names no key (kid) and the provider's JWKS has {len(keys)}"
            )
        found = [
            key
            for key in keys
            if key.get("alg", alg) == alg and (kid is None or key.get("kid") == kid)
        ]
        if not found:
            raise SuspiciousOperation(f"no key of the provider's JWKS matches kid {kid!r}")
        return jwt.PyJWK(found[0])

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

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The account of the provider's identity (the verified id_token's `iss` and `sub`),
        its e-mail and groups following the provider; SignInRefused when there is none this
        identity may sign in as."""
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            username, email = claimed_account(claims)
            identity = (str(payload["iss"]), str(payload["sub"]))
            if not identity[1] or max(map(len, identity)) > IDENTITY_LENGTH:
                raise SignInRefused(f"an issuer or subject Gatehouse cannot keep: {identity}")
            # The account, its link, its e-mail and its groups change together or not at all.
            with transaction.atomic():
                user, created = self.account_of(identity, username=username, email=email)
                self.follow_provider(user, claims, email=email, created=created)
        except SignInRefused as exc:
            raise self.refused(exc) from exc
        except IntegrityError as exc:
            # The same new person signing in twice at once: the second finds the first's
            # account (or its identity) made meanwhile, and tries again.
            raise SuspiciousOperation(f"an account was made meanwhile: {exc}") from exc
        return user

    def account_of(
        self, identity: tuple[str, str], *, username: str, email: str
    ) -> tuple[User, bool]:
        """The account linked to `identity`, else (its first sign-in) a new one named
        `username`, or the one of that name if it is no one else's; whether it is new."""
        issuer, subject = identity
        linked = (
            CompanyIdentity.objects.select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if linked is not None:
            if linked.user.is_superuser:
                raise SignInRefused(
                    f"{subject} is linked to a superuser",
                    shown=ADMINISTRATOR.format(username=linked.user.get_username()),
                )
            return linked.user, False
        # Two first sign-ins under this name at once: the row lock makes the second wait and
        # see the first's link (and refuse), where both would link or make it.
        existing = User.objects.select_for_update().filter(username=username).first()
        if existing is None:
            # No usable password: this person signs in only through the provider.
            user = User.objects.create_user(username, email=email)
            self.link(user, issuer=issuer, subject=subject)
            return user, True
        self.check_linkable(existing, subject=subject)
        self.link(existing, issuer=issuer, subject=subject)
        return existing, False

    def check_linkable(self, user: User, *, subject: str) -> None:
        """Refuse, unless a first sign-in may link this existing account: only one made to
        sign in this way (no usable password, no identity yet: made before identities were
        kept, or by an administrator for this person)."""
        name = user.get_username()
        if user.is_superuser:
            raise SignInRefused(
                f"{name} is a local administrator account",
                shown=ADMINISTRATOR.format(username=name),
            )
        if user.has_usable_password():
            raise SignInRefused(
                f"{subject} may not take over {name}, which has a usable password",
                shown=LOCAL_ACCOUNT.format(username=name),
            )
        if CompanyIdentity.objects.filter(user=user).exists():
            raise SignInRefused(
                f"{name} is linked to another company identity than {subject}",
                shown=LINKED_ELSEWHERE.format(username=name),
            )

    def link(self, user: User, *, issuer: str, subject: str) -> None:
        CompanyIdentity.objects.create(
            user=user, issuer=issuer, subject=subject, created_at=timezone.now()
        )
        logger.info("company identity %s linked to account %s", subject, user.pk)

    def follow_provider(
        self, user: User, claims: dict[str, Any], *, email: str, created: bool
    ) -> None:
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        user_roles_follow_provider(user=user, groups=provider_groups(claims), created=created)


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
        messages.error(self.request, self.request.session.pop(REFUSAL_KEY, REFUSED))
        return HttpResponseRedirect(self.failure_url)
