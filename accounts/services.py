"""Making teams, giving them roles and people, and adding people: each change one atomic,
audited use case, allowed to administrators (accounts.manage_teams) and superusers.

No one escalates through these: a person never changes their own teams, nor the roles of a
team they are in (so never gives a team of theirs the administrator role); only a superuser
changes a superuser's account; and no change leaves Gatehouse without an active administrator
when it had one. A superuser may do all of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django.db import IntegrityError, transaction

from accounts.models import Team
from accounts.roles import MANAGE_TEAMS, ROLES, known_roles, team_permissions_apply
from accounts.selectors import administrators
from audit.models import AuditAction
from audit.services import audit_record
from core.codes import Refusal
from core.errors import ServiceError

# A team's name is what the catalogue's routes and approval rules write: letters, digits,
# spaces, dots, dashes and underscores, starting with a letter or a digit.
TEAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,149}")
DESCRIPTION_LENGTH = 1000
NAME_PART_LENGTH = 150  # User.first_name and .last_name
PROVIDER_GROUP_LENGTH = 200
PROVIDER_GROUPS_MAX = 50


class FieldRefused(ServiceError):
    """An input refused, and the field it was given in (a form shows it there)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(Refusal.INVALID_INPUT, message)
        self.field = field


def _invalid(field: str, message: str) -> FieldRefused:
    return FieldRefused(field, message)


def _check_manager(by: User) -> None:
    if not (by.is_active and by.has_perm(MANAGE_TEAMS)):
        raise ServiceError(
            Refusal.FORBIDDEN, "only an administrator makes teams and changes who is in them"
        )


def _team_for_update(name: str) -> Team:
    """The team, its row locked: two changes of one team at once are made one after the
    other, each from what the other left."""
    return Team.objects.select_for_update().select_related("group").get(group__name=name)


def _is_member(user: User, team: Team) -> bool:
    return user.groups.filter(pk=team.group_id).exists()


def _checked_roles(roles: Iterable[str]) -> list[str]:
    chosen = list(roles)
    unknown = sorted(set(chosen) - set(ROLES))
    if unknown:
        raise _invalid("roles", f"there is no role {', '.join(unknown)}")
    return known_roles(chosen)


def _checked_description(description: str) -> str:
    text = description.strip()
    if len(text) > DESCRIPTION_LENGTH:
        raise _invalid("description", f"a description is at most {DESCRIPTION_LENGTH} characters")
    return text


def _administrators_locked() -> int:
    """How many active administrators there are, their account rows locked: two changes at
    once that would each leave the other's administrator as the last one (two deactivating
    each other) are made one after the other, and the second sees the first's."""
    ids = list(administrators().values_list("pk", flat=True))
    list(User.objects.select_for_update().filter(pk__in=ids).order_by("pk").values("pk"))
    return administrators().count()


def _keep_an_administrator(before: int) -> None:
    """Refuse (rolling the change back) a change after which nobody active may manage teams."""
    if before and not administrators().exists():
        raise ServiceError(
            Refusal.LAST_ADMINISTRATOR,
            "that would leave nobody who may manage teams and people: make someone else an "
            "administrator first",
        )


def check_team_name(name: str) -> str:
    """The name as a team is made with; ServiceError when it cannot be one."""
    name = name.strip()
    if not TEAM_NAME.fullmatch(name):
        raise _invalid(
            "name",
            "a team's name is 1 to 150 letters, digits, spaces, dots, dashes or underscores, "
            "starting with a letter or a digit",
        )
    return name


def team_create(*, name: str, description: str, roles: Iterable[str], by: User) -> Team:
    """A new team with these roles and no one in it; its group holds its roles' permissions."""
    _check_manager(by)
    name, chosen = check_team_name(name), _checked_roles(roles)
    text = _checked_description(description)
    with transaction.atomic(durable=True):
        if Group.objects.filter(name__iexact=name).exists():
            raise _invalid("name", f"there is already a team named {name}")
        try:
            # a savepoint: the same name made meanwhile, by another request
            with transaction.atomic():
                group = Group.objects.create(name=name)
        except IntegrityError as exc:
            raise _invalid("name", f"there is already a team named {name}") from exc
        team = Team.objects.create(group=group, roles=chosen, description=text)
        team_permissions_apply(team)
        audit_record(
            action=AuditAction.TEAM_CREATED, actor=by, team=name, roles=chosen, description=text
        )
    return team


def team_change(*, name: str, roles: Iterable[str], description: str, by: User) -> Team:
    """Give the team these roles (its permissions follow) and this description. A member of
    the team may change its description, never its roles."""
    _check_manager(by)
    chosen, text = _checked_roles(roles), _checked_description(description)
    with transaction.atomic(durable=True):
        admins = _administrators_locked()
        team = _team_for_update(name)
        before = known_roles(team.roles)
        if chosen != before and not by.is_superuser and _is_member(by, team):
            raise ServiceError(
                Refusal.OWN_ACCESS,
                f"you are in {name}, so you cannot change its roles: another administrator does",
            )
        if chosen == before and text == team.description:
            return team
        team.roles, team.description = chosen, text
        team.save(update_fields=["roles", "description"])
        team_permissions_apply(team)
        _keep_an_administrator(admins)
        audit_record(
            action=AuditAction.TEAM_CHANGED,
            actor=by,
            team=name,
            roles_before=before,
            roles=chosen,
            description=text,
        )
    return team


def team_member_add(*, name: str, username: str, by: User) -> User:
    """Put the person of this username in the team."""
    _check_manager(by)
    with transaction.atomic(durable=True):
        team = _team_for_update(name)
        person = User.objects.filter(username=username.strip()).first()
        if person is None:
            raise _invalid("username", f"there is nobody with the username {username.strip()}")
        _check_not_self(by, person, f"add yourself to {name}")
        if not person.is_active:
            raise _invalid("username", f"{person.get_username()} is deactivated")
        if _is_member(person, team):
            return person
        person.groups.add(team.group)
        audit_record(
            action=AuditAction.TEAM_MEMBER_ADDED,
            actor=by,
            team=name,
            person=person.get_username(),
            roles=known_roles(team.roles),
        )
    return person


def team_member_remove(*, name: str, user_id: int, by: User) -> User:
    """Take the person out of the team."""
    _check_manager(by)
    with transaction.atomic(durable=True):
        admins = _administrators_locked()
        team = _team_for_update(name)
        person = User.objects.get(pk=user_id)
        _check_not_self(by, person, f"take yourself out of {name}")
        if not _is_member(person, team):
            return person
        person.groups.remove(team.group)
        _keep_an_administrator(admins)
        audit_record(
            action=AuditAction.TEAM_MEMBER_REMOVED,
            actor=by,
            team=name,
            person=person.get_username(),
            roles=known_roles(team.roles),
        )
    return person


def _check_not_self(by: User, person: User, what: str) -> None:
    if person.pk == by.pk and not by.is_superuser:
        raise ServiceError(
            Refusal.OWN_ACCESS, f"you cannot {what}: another administrator changes your teams"
        )


def check_provider_groups(names: Iterable[str]) -> list[str]:
    """The provider's group names, each once, in the order given; ServiceError for a name
    the provider could not send."""
    found: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name or name in found:
            continue
        if not name.isprintable() or len(name) > PROVIDER_GROUP_LENGTH:
            raise _invalid(
                "provider_groups",
                f"a sign-in group's name is at most {PROVIDER_GROUP_LENGTH} characters on one line",
            )
        found.append(name)
    if len(found) > PROVIDER_GROUPS_MAX:
        raise _invalid(
            "provider_groups", f"a team maps at most {PROVIDER_GROUPS_MAX} sign-in groups"
        )
    return found


def team_provider_groups_set(*, name: str, provider_groups: Iterable[str], by: User) -> Team:
    """The company sign-in's groups whose members are put in this team (and taken out of it
    when they are no longer in any of them) at each company sign-in (accounts.oidc)."""
    _check_manager(by)
    chosen = check_provider_groups(provider_groups)
    with transaction.atomic(durable=True):
        team = _team_for_update(name)
        before = list(team.provider_groups)
        if chosen == before:
            return team
        team.provider_groups = chosen
        team.save(update_fields=["provider_groups"])
        audit_record(
            action=AuditAction.TEAM_PROVIDER_GROUPS_CHANGED,
            actor=by,
            team=name,
            provider_groups_before=before,
            provider_groups=chosen,
        )
    return team


def _checked_person(*, first_name: str, last_name: str, email: str) -> tuple[str, str, str]:
    first, last, address = first_name.strip(), last_name.strip(), email.strip()
    for field, part in (("first_name", first), ("last_name", last)):
        if len(part) > NAME_PART_LENGTH or not part.isprintable():
            raise _invalid(field, f"a name is at most {NAME_PART_LENGTH} characters on one line")
    if address:
        try:
            EmailValidator()(address)
        except ValidationError as exc:
            raise _invalid("email", "that is not an e-mail address") from exc
    return first, last, address


def check_username(username: str) -> str:
    """The username as an account is made with; ServiceError when it cannot be one."""
    name = User.normalize_username(username.strip())
    try:
        if not name or len(name) > NAME_PART_LENGTH or not name.isprintable():
            raise ValidationError("length")
        UnicodeUsernameValidator()(name)
    except ValidationError as exc:
        raise _invalid(
            "username", "a username is 1 to 150 letters, digits and @ . + - _ (no spaces)"
        ) from exc
    return name


def person_create(
    *,
    username: str,
    first_name: str,
    last_name: str,
    email: str,
    password: str | None,
    by: User,
) -> User:
    """A new account in no team. With `password` (checked by the password validators) the
    person signs in with it; without, the account has no usable password and the person
    signs in with their company account (its first company sign-in links it)."""
    _check_manager(by)
    name = check_username(username)
    first, last, address = _checked_person(first_name=first_name, last_name=last_name, email=email)
    person = User(username=name, first_name=first, last_name=last, email=address)
    if password:
        try:
            validate_password(password, user=person)
        except ValidationError as exc:
            raise _invalid("password", " ".join(exc.messages)) from exc
        person.set_password(password)
    else:
        person.set_unusable_password()
    with transaction.atomic(durable=True):
        if User.objects.filter(username__iexact=name).exists():
            raise _invalid("username", f"there is already a person named {name}")
        try:
            with transaction.atomic():  # a savepoint: the same username made meanwhile
                person.save()
        except IntegrityError as exc:
            raise _invalid("username", f"there is already a person named {name}") from exc
        audit_record(
            action=AuditAction.PERSON_ADDED,
            actor=by,
            person=name,
            name=person.get_full_name(),
            email=address,
            signs_in_with="password" if password else "company account",
        )
    return person


def _person_for_update(user_id: int, by: User) -> User:
    person = User.objects.select_for_update().get(pk=user_id)
    if person.is_superuser and not by.is_superuser:
        raise ServiceError(Refusal.FORBIDDEN, "only a superuser changes a superuser's account")
    return person


def person_change(*, user_id: int, first_name: str, last_name: str, email: str, by: User) -> User:
    """Change the person's name and e-mail address."""
    _check_manager(by)
    first, last, address = _checked_person(first_name=first_name, last_name=last_name, email=email)
    with transaction.atomic(durable=True):
        person = _person_for_update(user_id, by)
        before = {"first_name": person.first_name, "last_name": person.last_name}
        before["email"] = person.email
        after = {"first_name": first, "last_name": last, "email": address}
        changed = sorted(field for field in after if after[field] != before[field])
        if not changed:
            return person
        for field in changed:
            setattr(person, field, after[field])
        person.save(update_fields=changed)
        audit_record(
            action=AuditAction.PERSON_CHANGED,
            actor=by,
            person=person.get_username(),
            before={field: before[field] for field in changed},
            after={field: after[field] for field in changed},
        )
    return person


def person_deactivate(*, user_id: int, by: User) -> User:
    """The person can no longer sign in (their sessions end at their next page); their
    history stays. Refused for one's own account (but a superuser's), and for the last active
    administrator."""
    _check_manager(by)
    with transaction.atomic(durable=True):
        admins = _administrators_locked()
        if not User.objects.filter(pk=by.pk, is_active=True).exists():
            # Deactivated while this waited for the lock (by the one it was deactivating).
            raise ServiceError(Refusal.FORBIDDEN, "your account was deactivated meanwhile")
        person = _person_for_update(user_id, by)
        if person.pk == by.pk and not by.is_superuser:
            raise ServiceError(
                Refusal.OWN_ACCESS, "you cannot deactivate your own account: ask another one"
            )
        if not person.is_active:
            return person
        person.is_active = False
        person.save(update_fields=["is_active"])
        _keep_an_administrator(admins)
        audit_record(action=AuditAction.PERSON_DEACTIVATED, actor=by, person=person.get_username())
    return person
