"""Reads of a run's own record for the pages: its comment thread (and the same shape for a
task's thread)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.contrib.auth.models import User

from automation.runs.comments import body_pieces
from automation.runs.models import RunComment


class Commented(Protocol):
    """A comment of a thread: a run's (RunComment) or a task's (automation's TaskComment)."""

    pk: Any
    body: str
    mentions: Any


@dataclass(frozen=True)
class ShownComment:
    """A comment as its thread shows it: the body in pieces, each mention marked."""

    comment: Any  # a Commented, with its author and time for the template
    pieces: list[tuple[str, bool]]


def comment_thread(run_id: int) -> list[ShownComment]:
    """The run's comments, oldest first, with their authors: one query, and one more for the
    names of the people they mention, whatever the number of comments."""
    comments = list(RunComment.objects.filter(run_id=run_id).select_related("author"))
    mentioned = {pk for c in comments for pk in c.mentions.get("users", [])}
    people = User.objects.filter(pk__in=mentioned).values_list("pk", "username")
    return shown(comments, dict(people) if mentioned else {})


def shown(comments: Iterable[Commented], usernames: Mapping[int, str]) -> list[ShownComment]:
    """Each comment with its mentions marked: the groups it names, and the people by the
    usernames given (those it names, by id)."""
    found = []
    for comment in comments:
        users = comment.mentions.get("users", [])
        marked = {usernames[pk] for pk in users if pk in usernames}
        marked |= set(comment.mentions.get("groups", []))
        found.append(ShownComment(comment, body_pieces(comment.body, marked)))
    return found
