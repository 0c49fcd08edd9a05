"""How long a login POST takes, as a person signing in waits for it: most of it is the
password hasher's work (settings.PASSWORD_HASHERS), which runs on every login.

    .venv/bin/python -m bench.login [--runs 20]

It makes a throwaway database on the server the settings name (the embedded one when
DATABASE_URL names none), signs one user in `--runs` times through the real login view with
Django's test client, and prints one JSON object: the hasher, then median, p95 and the
slowest in milliseconds. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import django

PASSWORD = "correct horse battery staple 42"  # noqa: S105 - a throwaway account


def measure(runs: int) -> dict[str, object]:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        User.objects.create_user("timing", password=PASSWORD)
        seconds = []
        for _ in range(runs):
            client = Client()
            started = time.perf_counter()
            response = client.post("/accounts/login/", {"username": "timing", "password": PASSWORD})
            seconds.append(time.perf_counter() - started)
            if response.status_code != 302:  # not signed in: the figure would mean nothing
                raise SystemExit(f"the login answered {response.status_code}, not a redirect")
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)
    ms = sorted(1000 * s for s in seconds)
    return {
        "hasher": settings.PASSWORD_HASHERS[0].rsplit(".", 1)[-1],
        "runs": runs,
        "median_ms": round(statistics.median(ms)),
        "p95_ms": round(ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]),
        "max_ms": round(ms[-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Production's settings start only with a key; a local benchmark's own will do.
    os.environ.setdefault("GATEHOUSE_SECRET_KEY", "bench-only-not-secret")
    django.setup()
    print(json.dumps(measure(args.runs)))


if __name__ == "__main__":
    main()
