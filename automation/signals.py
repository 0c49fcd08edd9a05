"""Moments in a run's life that code outside the product may hook into.

Nothing in the product listens to them. The crash tests' fault-injection switches
(devtools.faults) connect here, so the product never imports the development tools; a
signal with no receiver costs one check per send.
"""

from __future__ import annotations

from django.dispatch import Signal

# A worker is about to call the classifier for a run (keyword `run_id`): every step before
# this one has committed and the worker holds the classifier lease.
classifier_call_starting = Signal()

# A remote effect delivery has its answer (keyword `effect_id`), and nothing has recorded it
# yet: a worker that dies now leaves a delivery that happened downstream unrecorded here.
effect_sent_downstream = Signal()
