"""What policy announces to the apps above it; policy itself imports none of them."""

from __future__ import annotations

from django.dispatch import Signal

# A version became the active one. Keywords: `name`, `previous` (the version it replaced, or
# None) and `user` (None for a command or a default loaded at start). Sent inside the
# activating transaction, so what a receiver writes commits or rolls back with it: the audit
# trail records it (audit.receivers), and reports read activations from that trail.
version_activated = Signal()
