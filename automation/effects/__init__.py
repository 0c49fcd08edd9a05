"""Effects: the outbox's models (`models`) and the adapters that deliver one outbox row,
keyed by its idempotency key (`adapters`).

Local adapters write their record inside the console's own transaction, so delivery and
completion commit together. Remote adapters (HTTP) are called outside any transaction, under
a lease, and report what happened as a Delivery; the outbox decides what to do with it.
"""
