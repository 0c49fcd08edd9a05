"""Settings of the benchmark's web server: the product's, plus the bare reference view."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
