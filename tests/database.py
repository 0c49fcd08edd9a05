"""The test database as a DATABASE_URL, for the processes a test starts (workers, a shell)."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def database_url() -> str:
    """The URL of the database this test run uses, on whichever server it is: a TCP host, or
    the embedded server's socket folder (percent-encoded, as libpq reads a path host)."""
    db = connection.settings_dict
    user = quote(db["USER"] or "", safe="")
    if db.get("PASSWORD"):
        user += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    if host.startswith("/"):
        return f"postgres://{user}@{quote(host, safe='')}/{db['NAME']}"
    return f"postgres://{user}@{host}:{db['PORT'] or 5432}/{db['NAME']}"
