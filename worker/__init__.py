"""The worker wing: what Gatehouse changes in django-q2, in one package (docs/worker.md).

Messages sent with their transaction (`dispatch`), the priority brokers and their wake-up
(`broker`), the cluster command that stops in order (`management/commands/qcluster.py`),
the pools that keep calls in flight beside a worker's tasks (`pools`), the check that
refuses an unsafe cluster configuration (`checks`), and the typed settings the wing reads
(`conf`). It imports `core`, Django and django-q2, never an app: the apps import it.
"""
