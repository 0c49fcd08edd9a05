"""Benchmarks: `make bench` (throughput). Never part of `make test`."""
