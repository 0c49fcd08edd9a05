"""The readers a channel may be given, in words: what each does, and the versions a channel
reading with it is stamped with.

A reader is offered only where it can read: the local reader always; the learned reader once
a model is trained and active; a model server's reader only when the operator configured a
server (GATEHOUSE_OPENAI_BASE_URL); recorded readings only where the development tools are
installed (the tests and the demo), never on a production install.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.apps import apps
from django.conf import settings

from automation.classifiers import classifier_versions
from automation.classifiers.base import CLASSIFIERS
from automation.classifiers.models import ClassifierModel
from automation.conf import setting

LOCAL = "heuristic"
LEARNED = "learned"
MODEL_SERVER = "openai-compatible"
RECORDED = "recorded"


@dataclass(frozen=True)
class Reader:
    name: str  # the classifier's name, as the channel stores it
    words: str  # what it does, for the person who chooses


def reader_words(name: str) -> str:
    """What the reader `name` does, in words (its name, for one this module does not know)."""
    if name == LOCAL:
        return "Local reader: the cue words of the business, no model"
    if name == LEARNED:
        return "Learned reader: a model trained on the business's labelled messages, on this server"
    if name == MODEL_SERVER:
        # The server by its host only: an address may carry a user name and password.
        server = urlsplit(setting("OPENAI_BASE_URL"))
        where = server.hostname or "the configured server"
        where += f":{server.port}" if server.port else ""
        return f"Model server: the model {setting('OPENAI_MODEL')} at {where} reads each message"
    if name == RECORDED:
        return "Recorded readings: answers written beforehand, for tests and the demo only"
    return name


def _offered(name: str) -> bool:
    if name == LEARNED:
        return ClassifierModel.objects.filter(is_active=True).exists()
    if name == MODEL_SERVER:
        return bool(settings.GATEHOUSE_OPENAI_CONFIGURED)
    if name == RECORDED:
        return apps.is_installed("devtools")
    return name in CLASSIFIERS


def readers_available() -> list[Reader]:
    """The readers a channel may be given here, the local one first."""
    order = [LOCAL, LEARNED, MODEL_SERVER, RECORDED]
    names = [*order, *sorted(set(CLASSIFIERS) - set(order))]
    return [Reader(name, reader_words(name)) for name in names if _offered(name)]


def reader_versions(name: str) -> tuple[str, str]:
    """(classifier version, prompt version) a channel reading with `name` is stamped with."""
    return classifier_versions(name)
