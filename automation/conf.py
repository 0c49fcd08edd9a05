"""Typed access to the GATEHOUSE settings block (config/settings.py).

Each key's type is stated once, in the overload that names it, and a test holds the
settings to it; the worker wing's keys (Q_SERVES, Q_STOP_GRACE) are typed in `worker.conf`.
The block is read at every call, so a changed setting (tests change them) counts at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, cast, overload

from django.conf import settings

IntSetting = Literal[
    "MAX_EVENT_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_HEADER_BLOCK_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_ENCODED_WORDS",
    "MAX_HTML_BYTES",
    "CLASSIFIER_DEADLINE_SECONDS",
    "CLASSIFIER_MAX_ATTEMPTS",
    "RETRY_BACKOFF_BASE_SECONDS",
    "RETRY_BACKOFF_CAP_SECONDS",
    "STAGE_LEASE_SECONDS",
    "EFFECT_LEASE_SECONDS",
    "PREVIEW_FRESH_SECONDS",
    "OPENAI_MAX_TOKENS",
    "OPENAI_CONCURRENCY",
    "OPENAI_RPM",
    "OPENAI_TPM",
    "OPENAI_BREAKER_FAILURES",
    "OPENAI_BREAKER_COOLING_SECONDS",
    "MAILBOX_BACKOFF_MAX_SECONDS",
]
StrSetting = Literal[
    "WORKFLOW_VERSION",
    "PROMPT_VERSION",
    "DEFAULT_CLASSIFIER",
    "CUSTOMER_REFERENCE_PATTERN",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_OUTPUT",
    "PROMPT_FILE",
    "METRICS_TOKEN",
    "OPENAI_WHEN_UNAVAILABLE",
    "OPENAI_DAILY_BUDGET",
    "OPENAI_WHEN_OVER_BUDGET",
    "BASE_URL",
]


@overload
def setting(name: IntSetting) -> int: ...
@overload
def setting(name: StrSetting) -> str: ...
@overload
def setting(name: Literal["NOTIFY_NEAR"]) -> float: ...
@overload
def setting(
    name: Literal["CHANNEL_CLASSIFIERS", "OPENAI_PRICES", "NOTIFY_WEBHOOKS"],
) -> dict[str, str]: ...
@overload
def setting(name: Literal["MAILBOXES"]) -> dict[str, dict[str, object]]: ...
def setting(name: str) -> object:
    block = cast(Mapping[str, object], settings.GATEHOUSE)
    return block[name]
