"""The model server of `make bench`'s model phase: an OpenAI-compatible chat-completions
endpoint on 127.0.0.1 that answers every request after a fixed latency, as a model does.

It answers each request with the reading of the bench's events (a support request that
goes straight through), so the run shape is the drain's with a remote reader. It prints
one JSON line with its base URL once it listens, and on SIGTERM or SIGINT one more with
the requests it took and the most it held at once, then exits.

usage: python -m bench.modelserver [--latency SECONDS]
"""

from __future__ import annotations

import argparse
import json
import signal

from tests.chatserver import content, running_chat_server

MODEL = "bench-model"
# What a model reads in the bench's events (bench.throughput.event): a support request
# asking for a follow-up, which the default policy lets through.
READING = {
    "category": "support",
    "recommended_route": "service_desk",
    "requested_effect": "create_follow_up",
    "reason_code": "export_failure",
    "confidence": 0.93,
    "fields": {},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # taken below, by sigwait
    options = {"model": MODEL, "default": content(READING), "latency": args.latency}
    with running_chat_server(**options) as chat:
        print(json.dumps({"base_url": chat.base_url}), flush=True)
        signal.sigwait(stops)
        print(
            json.dumps({"requests": chat.count(), "most_in_flight": chat.most_in_flight}),
            flush=True,
        )


if __name__ == "__main__":
    main()
