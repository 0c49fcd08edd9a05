"""Fixtures of the tests that read requests with a model server: a real chat-completions
server on 127.0.0.1 (tests/chatserver.py) and the settings that point the classifier at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from automation.classifiers import classifier_versions
from automation.models import IntakeChannel
from tests.chatserver import ChatServer, running_chat_server
from tests.conftest import Pipeline

MODEL = "test-model"
SettingsWrapper = Any  # pytest-django's `settings` fixture (its class is private)


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with running_chat_server(model=MODEL) as server:
        yield server


def configure(settings: SettingsWrapper, **values: Any) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, **values}


def point_at(settings: SettingsWrapper, chat: ChatServer, **values: Any) -> None:
    """Point the openai-compatible classifier at the chat server, with other settings."""
    configure(
        settings,
        OPENAI_BASE_URL=chat.base_url,
        OPENAI_MODEL=MODEL,
        OPENAI_API_KEY="",
        CLASSIFIER_DEADLINE_SECONDS=5,
        **values,
    )


@pytest.fixture
def llm(settings: SettingsWrapper, chat: ChatServer) -> SettingsWrapper:
    point_at(settings, chat)
    return settings


def llm_pipeline(name: str, attempts: int) -> Pipeline:
    """A channel read by the openai-compatible classifier, as configured now."""
    classifier_version, prompt_version = classifier_versions("openai-compatible")
    channel = IntakeChannel.objects.create(
        name=name,
        classifier="openai-compatible",
        classifier_version=classifier_version,
        workflow_version="workflow-1",
        prompt_version=prompt_version,
        max_classifier_attempts=attempts,
    )
    return Pipeline(channel)
