"""Bulk history for `make bench-pages`: N runs with their records, in PostgreSQL alone.

Every table is filled by one INSERT ... SELECT over generate_series, so a million runs take
minutes and the memory of the server, not of Python. The values are those the pipeline
writes (see automation.pipeline.classify, .decide, .execute and automation.runs.journal):
the JSON of normalized, enrichment, classification and rules, the queue of a held run, the pending
approval request routed to its group, so that the pages' queries, indexes and partial
indexes meet what production holds. The column lists follow the models;
tests/test_bench_pages.py holds them to it.

The mix, by run number n (1..N), in every block of 100 runs:
  0-84 completed (85 %), 85-90 one held run in each of six exception queues, 91 waiting
  for approval, 92-95 blocked by policy, 96-99 failed on a rejected approval;
and run N itself waits for approval too (a million runs: 10,001 pending approvals).
Runs are spread evenly over HISTORY, oldest first, so the reports have months behind them.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db.backends.utils import CursorWrapper

HISTORY = timedelta(days=240)
# The exception queues a held run lands in (Run.hold sets queue = outcome).
QUEUES = (
    "low_confidence",
    "classification_invalid",
    "extraction_invalid",
    "retry_exhausted",
    "effect_unavailable",
    "effect_uncertain",
)
APPROVAL_GROUP = "security-approvers"
ESCALATE_TO = "ops-leads"


def mix(runs: int) -> Counter[str]:
    """How many runs of each kind `generate` makes (tests compare the database with it)."""
    return Counter(kind_of(n, runs) for n in range(1, runs + 1))


def kind_of(n: int, runs: int) -> str:
    """The kind of run number n: the Python twin of the CASE in PLAN (for tests)."""
    m = n % 100
    if n == runs or m == 91:
        return "approval"
    if m < 85:
        return "completed"
    if m <= 90:
        return QUEUES[m - 85]
    return "blocked" if m <= 95 else "rejected"


# One row per run: its ids, kind and request. A temporary table, read by every INSERT below.
PLAN = """
CREATE TEMPORARY TABLE bench_plan AS
SELECT n, %(run0)s + n AS rid, %(intake0)s + n AS iid, kind,
       CASE WHEN kind IN ('approval', 'rejected') THEN 'security'
            ELSE (ARRAY['support', 'billing', 'sales', 'security'])[mod(n, 4) + 1] END AS category,
       CASE WHEN mod(n, 7) = 0 THEN 'priority' ELSE 'standard' END AS tier,
       %(start)s::timestamptz + (n - 1) * %(step)s::interval AS created
FROM (
    SELECT n, CASE
        WHEN n = %(runs)s OR mod(n, 100) = 91 THEN 'approval'
        WHEN mod(n, 100) < 85 THEN 'completed'
        WHEN mod(n, 100) <= 90 THEN (%(queues)s::text[])[mod(n, 100) - 84]
        WHEN mod(n, 100) <= 95 THEN 'blocked'
        ELSE 'rejected' END AS kind
    FROM generate_series(1, %(runs)s) AS n
) AS numbered
"""

# The request itself, as its sender wrote it.
PLAN_REQUEST = """
CREATE TEMPORARY TABLE bench_request AS
SELECT p.*, 'evt-' || to_char(p.created, 'YYYYMMDD') || '-' || p.rid AS event_id,
       CASE p.category WHEN 'support' THEN 'service_desk' WHEN 'billing' THEN 'finance'
            WHEN 'sales' THEN 'commercial' ELSE 'security_review' END AS route,
       CASE p.category WHEN 'security' THEN 'queue_account_review'
            ELSE 'create_follow_up' END AS effect,
       CASE p.category
            WHEN 'support' THEN (ARRAY['Cannot log in', 'Password reset link expired',
                                       'Export fails', '2FA lost'])[mod(p.n / 4, 4) + 1]
            WHEN 'billing' THEN (ARRAY['Invoice disputed', 'Refund for order',
                                       'VAT number missing', 'Card declined'])[mod(p.n / 4, 4) + 1]
            WHEN 'sales' THEN (ARRAY['Pricing for 40 seats', 'Quote for licences',
                                     'Renewal terms', 'Upgrade options'])[mod(p.n / 4, 4) + 1]
            ELSE (ARRAY['Suspicious sign-ins', 'Password reset from new device',
                        'Unknown API key'])[mod(p.n / 4, 3) + 1]
       END || ' (' || p.n || ')' AS subject
FROM bench_plan AS p
"""

INTAKE = """
INSERT INTO automation_intakerecord
    (id, channel_id, raw, raw_sha256, size, refused, content_type, source, admission_error,
     received_at)
SELECT b.iid, %(channel)s, b.raw, encode(sha256(b.raw), 'hex'), octet_length(b.raw), false,
       'application/json', 'api:bench', '', b.created
FROM (
    SELECT r.iid, r.created, convert_to(json_build_object(
               'event_id', r.event_id, 'source', 'web_form', 'request_type', r.category,
               'subject', r.subject, 'body', 'Please look into this: ' || r.subject || '.',
               'account_tier', r.tier, 'requested_action', r.effect)::text, 'UTF8') AS raw
    FROM bench_request AS r
) AS b
"""

# Whether a kind got as far as a classification, a decision, an effect.
CLASSIFIED = "r.kind NOT IN ('classification_invalid', 'retry_exhausted')"
DECIDED = "r.kind NOT IN ('low_confidence', 'classification_invalid', 'extraction_invalid', " + (
    "'retry_exhausted')"
)
EFFECTED = "r.kind IN ('completed', 'effect_unavailable', 'effect_uncertain')"
TERMINAL = "r.kind IN ('completed', 'blocked', 'rejected')"

RUNS = f"""
INSERT INTO automation_run
    (id, channel_id, intake_id, event_id, identity_scope, claims_identity, replay_of_id,
     reply_to_event_id, thread_parent_id, state, outcome, claimed_at, failure_field,
     failure_detail, normalized, fingerprint, enrichment, workflow_version, classifier_version,
     prompt_version, policy_version, classification, category, reason_code, confidence, route,
     effect_name, rules, signals_reviewed, queue, queued_at, owner_id, classify_attempts,
     classify_attempts_spent, prompt_tokens, completion_tokens, model_cost, waiting_for,
     next_attempt_at, lease_expires_at, dispatched_at, created_at, updated_at, finished_at,
     version)
SELECT r.rid, c.id, r.iid, r.event_id, c.name, true, NULL, '', NULL,
       CASE r.kind WHEN 'completed' THEN 'completed' WHEN 'approval' THEN 'approval_required'
            WHEN 'blocked' THEN 'blocked' WHEN 'rejected' THEN 'failed'
            ELSE 'needs_review' END,
       CASE r.kind WHEN 'completed' THEN 'completed' WHEN 'approval' THEN ''
            WHEN 'blocked' THEN 'policy_block' WHEN 'rejected' THEN 'approval_rejected'
            ELSE r.kind END,
       NULL,
       CASE r.kind WHEN 'extraction_invalid' THEN 'fields.order_reference' ELSE '' END,
       CASE r.kind WHEN 'low_confidence' THEN 'confidence 0.35 is below 0.7'
            WHEN 'classification_invalid' THEN 'category: not one of the known categories'
            WHEN 'extraction_invalid' THEN 'order_reference: not a valid reference'
            WHEN 'retry_exhausted' THEN 'the classifier timed out 3 times'
            WHEN 'effect_unavailable' THEN 'the follow-up service answered 503'
            WHEN 'effect_uncertain' THEN 'no answer within 10 s: outcome unknown'
            ELSE '' END,
       jsonb_build_object('body', 'Please look into this: ' || r.subject || '.',
           'source', 'web_form', 'subject', r.subject, 'event_id', r.event_id,
           'account_tier', r.tier, 'request_type', r.category, 'requested_action', r.effect),
       encode(sha256(convert_to(c.name || '/' || r.event_id, 'UTF8')), 'hex'),
       jsonb_build_object('customer', NULL, 'account_tier', r.tier,
           'tier_is_default', r.tier = 'standard', 'customer_matched_by', 'none',
           'open_runs_same_request_type', mod(r.n, 50),
           'unknown_customer_references', '[]'::jsonb),
       c.workflow_version, c.classifier_version, c.prompt_version,
       CASE WHEN {DECIDED} THEN %(policy)s ELSE '' END,
       CASE WHEN {CLASSIFIED} THEN jsonb_build_object('fields', '{{}}'::jsonb,
           'category', r.category, 'confidence', CASE r.kind WHEN 'low_confidence' THEN 0.35
           ELSE 0.9 END, 'reason_code', r.category || '_keywords',
           'requested_effect', r.effect, 'recommended_route', r.route) END,
       CASE WHEN {CLASSIFIED} THEN r.category ELSE '' END,
       CASE WHEN {CLASSIFIED} THEN r.category || '_keywords' ELSE '' END,
       CASE WHEN NOT {CLASSIFIED} THEN NULL WHEN r.kind = 'low_confidence' THEN 0.35 ELSE 0.9 END,
       CASE WHEN {DECIDED} THEN r.route ELSE '' END,
       CASE WHEN {DECIDED} THEN r.effect ELSE '' END,
       CASE WHEN {DECIDED} THEN jsonb_build_array(
           jsonb_build_object('text', 'requested action ''' || r.effect || ''' is in the allowlist',
               'passed', r.kind <> 'blocked', 'rule_id', 'allowlist.' || r.effect),
           jsonb_build_object('text', 'category ''' || r.category
               || ''' must equal request type ''' || r.category || '''',
               'passed', true, 'rule_id', 'match.category'),
           jsonb_build_object('text', 'route ''' || r.route || ''' must be ''' || r.route
               || ''' for ''' || r.category || '''', 'passed', true,
               'rule_id', 'route.' || r.category),
           jsonb_build_object('text', 'effect ''' || r.effect
               || ''' must equal requested action ''' || r.effect || '''',
               'passed', true, 'rule_id', 'match.effect'),
           jsonb_build_object('text', 'proposed effect ''' || r.effect
               || ''' must be an allowed effect', 'passed', true,
               'rule_id', 'proposal.' || r.effect))
           || CASE WHEN r.category = 'security' THEN jsonb_build_array(jsonb_build_object(
               'text', 'effect ''' || r.effect || ''' needs 1 approval from {APPROVAL_GROUP}',
               'passed', true, 'rule_id', 'approval.' || r.effect)) ELSE '[]'::jsonb END
           ELSE '[]'::jsonb END,
       '[]'::jsonb,
       CASE WHEN r.kind = ANY(%(queues)s::text[]) THEN r.kind ELSE '' END,
       CASE WHEN r.kind = ANY(%(queues)s::text[]) THEN r.created + interval '3 seconds' END,
       NULL,
       CASE r.kind WHEN 'retry_exhausted' THEN 3 WHEN 'classification_invalid' THEN 3 ELSE 1 END,
       0, 0, 0, 0, '', NULL, NULL, NULL, r.created,
       r.created + interval '3 seconds',
       CASE WHEN {TERMINAL} THEN r.created + interval '3 seconds' END,
       6
FROM bench_request AS r CROSS JOIN automation_intakechannel AS c
WHERE c.id = %(channel)s
"""  # noqa: S608 - composed of this module's constants only

# How many of the pipeline's stages each kind went through (the last one is where it stopped).
STAGE_COUNT = """CASE r.kind WHEN 'completed' THEN 8 WHEN 'effect_unavailable' THEN 7
    WHEN 'effect_uncertain' THEN 7 WHEN 'classification_invalid' THEN 5
    WHEN 'extraction_invalid' THEN 5 WHEN 'retry_exhausted' THEN 5 ELSE 6 END"""

# Stage durations spread as in production: the classifier's call takes 0.3-6 s, an effect's
# delivery 50 ms-2 s, the in-process stages a few milliseconds.
DURATION = """(CASE s.stage WHEN 'classify' THEN 300 + mod(r.n::bigint * 7919, 5700)
    WHEN 'execute' THEN 50 + mod(r.n::bigint * 104729, 1950) ELSE mod(r.n * s.ord, 40) END)"""

STAGES = f"""
INSERT INTO automation_stagerecord
    (run_id, stage, attempt, started_at, finished_at, duration_ms, outcome, error_class)
SELECT r.rid, s.stage, 1,
       r.created + s.ord * interval '200 milliseconds',
       r.created + s.ord * interval '200 milliseconds' + {DURATION} * interval '1 millisecond',
       {DURATION},
       CASE WHEN s.ord < {STAGE_COUNT} THEN s.ok
            WHEN r.kind = 'completed' THEN s.ok
            WHEN r.kind IN ('approval', 'rejected') THEN 'approval_required'
            WHEN r.kind = 'blocked' THEN 'blocked'
            WHEN r.kind = 'low_confidence' THEN 'held'
            WHEN r.kind = 'retry_exhausted' THEN 'timeout'
            WHEN r.kind = 'effect_unavailable' THEN 'unavailable'
            WHEN r.kind = 'effect_uncertain' THEN 'uncertain'
            ELSE 'invalid' END,
       CASE WHEN s.ord = {STAGE_COUNT} AND r.kind = 'retry_exhausted' THEN 'TimeoutError'
            ELSE '' END
FROM bench_request AS r
JOIN (VALUES (1, 'intake', 'accepted'), (2, 'validate', 'ok'), (3, 'normalize', 'ok'),
             (4, 'enrich', 'ok'), (5, 'classify', 'ok'), (6, 'decide', 'authorized'),
             (7, 'execute', 'delivered'), (8, 'complete', 'ok')) AS s (ord, stage, ok)
  ON s.ord <= {STAGE_COUNT}
"""  # noqa: S608 - composed of this module's constants only

CHECKPOINTS = f"""
INSERT INTO automation_checkpoint (run_id, sequence, state, versions, data, source, created_at)
SELECT run.id, s.seq, s.state,
       jsonb_build_object('policy', CASE WHEN s.seq >= 3 THEN run.policy_version ELSE '' END,
           'prompt', run.prompt_version, 'workflow', run.workflow_version,
           'classifier', run.classifier_version),
       CASE s.state
           WHEN 'enriched' THEN jsonb_build_object('enrichment', run.enrichment)
           WHEN 'classified' THEN jsonb_build_object('classification', run.classification)
           WHEN 'completed' THEN jsonb_build_object('response_ref', 'follow-up:' || run.id)
           ELSE jsonb_build_object('decision', jsonb_build_object('route', run.route,
               'rules', run.rules, 'effect', run.effect_name,
               'verdict', CASE WHEN s.state = 'approval_required' THEN 'approve'
                    ELSE 'execute' END, 'policy_version', run.policy_version)) END,
       'pipeline', run.created_at + s.seq * interval '300 milliseconds'
FROM bench_request AS r JOIN automation_run AS run ON run.id = r.rid
JOIN (VALUES (1, 'enriched'), (2, 'classified'), (3, 'approval_required'),
             (4, 'executing'), (5, 'completed')) AS s (seq, state)
  ON s.seq = 1
  OR (s.seq = 2 AND {CLASSIFIED})
  OR (s.seq = 3 AND r.category = 'security' AND r.kind IN ('completed', 'approval', 'rejected'))
  OR (s.seq = 4 AND {EFFECTED})
  OR (s.seq = 5 AND r.kind = 'completed')
"""  # noqa: S608 - composed of this module's constants only

CLASSIFICATIONS = f"""
INSERT INTO automation_classificationattempt
    (run_id, attempt, classifier, classifier_version, prompt_version, outcome, raw_output,
     errors, latency_ms, created_at)
SELECT run.id, a.attempt, c.classifier, run.classifier_version, run.prompt_version,
       CASE WHEN r.kind = 'retry_exhausted' THEN 'timeout'
            WHEN r.kind = 'classification_invalid' THEN 'invalid' ELSE 'valid' END,
       CASE WHEN {CLASSIFIED} THEN run.classification
            WHEN r.kind = 'classification_invalid' THEN '{{"category": "unknown"}}'::jsonb END,
       CASE WHEN r.kind = 'classification_invalid'
            THEN '["category: not one of the known categories"]'::jsonb
            ELSE '[]'::jsonb END,
       20 + mod(r.n, 200), run.created_at + a.attempt * interval '1 second'
FROM bench_request AS r JOIN automation_run AS run ON run.id = r.rid
JOIN automation_intakechannel AS c ON c.id = run.channel_id
JOIN generate_series(1, 3) AS a (attempt) ON a.attempt <= run.classify_attempts
"""  # noqa: S608 - composed of this module's constants only

EFFECTS = f"""
INSERT INTO automation_effect
    (run_id, name, idempotency_key, payload, "authorization", status, attempts, last_error,
     response_ref, response_status, response_body, attempt_limit, deadline_at, next_attempt_at,
     lease_expires_at, dispatched_at, created_at, delivered_at)
SELECT run.id, run.effect_name,
       encode(sha256(convert_to(run.identity_scope || '/' || run.fingerprint || '/'
           || run.effect_name, 'UTF8')), 'hex'),
       jsonb_build_object('route', run.route, 'effect', run.effect_name,
           'subject', r.subject, 'event_id', run.event_id, 'account_tier', r.tier,
           'request_type', r.category),
       jsonb_build_object('policy_version', run.policy_version),
       CASE r.kind WHEN 'completed' THEN 'delivered' WHEN 'effect_uncertain' THEN 'uncertain'
            ELSE 'retry_wait' END,
       CASE r.kind WHEN 'completed' THEN 1 ELSE 5 END,
       CASE r.kind WHEN 'completed' THEN '' ELSE run.failure_detail END,
       CASE r.kind WHEN 'completed' THEN 'follow-up:' || run.id ELSE '' END,
       CASE r.kind WHEN 'completed' THEN 201 WHEN 'effect_unavailable' THEN 503 END,
       '', 5, run.created_at + interval '1 hour', NULL, NULL, NULL,
       run.created_at + interval '2 seconds',
       CASE r.kind WHEN 'completed' THEN run.finished_at END
FROM bench_request AS r JOIN automation_run AS run ON run.id = r.rid
WHERE {EFFECTED}
"""  # noqa: S608 - composed of this module's constants only

EFFECT_ATTEMPTS = """
INSERT INTO automation_effectattempt
    (effect_id, attempt, started_at, duration_ms, outcome, status_code, error_class, detail)
SELECT e.id, a.attempt, e.created_at + a.attempt * interval '100 milliseconds',
       5 + mod(e.id, 90),
       CASE e.status WHEN 'delivered' THEN 'delivered' WHEN 'uncertain' THEN 'uncertain'
            ELSE 'unavailable' END,
       e.response_status, '', e.last_error
FROM bench_request AS r JOIN automation_effect AS e ON e.run_id = r.rid
JOIN generate_series(1, 5) AS a (attempt) ON a.attempt <= e.attempts
"""

# The task rows of the delivered record effects (every effect of the reference business).
LOCAL_RECORDS = """
INSERT INTO automation_task
    (idempotency_key, run_id, effect, "group", route, subject, payload, created_at, note)
SELECT e.idempotency_key, e.run_id, e.name, '', coalesce(e.payload ->> 'route', ''),
       coalesce(e.payload ->> 'subject', ''), e.payload, e.delivered_at, ''
FROM bench_request AS r JOIN automation_effect AS e ON e.run_id = r.rid
WHERE e.status = 'delivered'
"""

# Security runs asked for an approval: pending, approved (then completed) or rejected.
APPROVALS = f"""
INSERT INTO approvals_approvalrequest
    (run_id, effect, effect_payload, fingerprint, workflow_version, policy_version, evidence,
     "group", required_approvals, status, status_reason, expires_at, escalate_at, escalate_to,
     escalated_at, consumed_at, created_at, decided_at)
SELECT run.id, run.effect_name,
       jsonb_build_object('route', run.route, 'effect', run.effect_name, 'subject', r.subject,
           'event_id', run.event_id, 'account_tier', r.tier, 'request_type', r.category),
       run.fingerprint, run.workflow_version, run.policy_version,
       jsonb_build_object('classification', run.classification, 'reason_code',
           run.reason_code, 'confidence', run.confidence,
           'rules', jsonb_path_query_array(run.rules, '$[*] ? (@.rule_id starts with "approval.")'),
           'versions', jsonb_build_object('policy', run.policy_version, 'prompt',
               run.prompt_version, 'workflow', run.workflow_version,
               'classifier', run.classifier_version),
           'conflicted_user_ids', '[]'::jsonb),
       '{APPROVAL_GROUP}', 1,
       CASE r.kind WHEN 'approval' THEN 'pending' WHEN 'rejected' THEN 'rejected'
            ELSE 'approved' END,
       '', run.created_at + interval '72 hours', run.created_at + interval '24 hours',
       '{ESCALATE_TO}', NULL,
       CASE r.kind WHEN 'completed' THEN run.finished_at END,
       run.created_at + interval '1 second',
       CASE WHEN r.kind <> 'approval'
            THEN run.created_at + interval '1 second' + mod(r.n, 240) * interval '1 minute' END
FROM bench_request AS r JOIN automation_run AS run ON run.id = r.rid
WHERE r.category = 'security' AND r.kind IN ('completed', 'approval', 'rejected')
"""  # noqa: S608 - composed of this module's constants only

DECISIONS = """
INSERT INTO approvals_approvaldecision
    (request_id, user_id, approve, comment, seen_fingerprint, seen_workflow_version,
     seen_policy_version, seen_effect, counted, refusal, created_at)
SELECT a.id, %(approver)s, a.status = 'approved', '', a.fingerprint, a.workflow_version,
       a.policy_version, a.effect, true, '', a.decided_at
FROM bench_request AS r JOIN approvals_approvalrequest AS a ON a.run_id = r.rid
WHERE a.status IN ('approved', 'rejected')
"""

# A few trail rows per run: received, classified, where it ended; and approval decisions.
AUDIT = f"""
INSERT INTO audit_auditevent
    (run_id, intake_id, approval_id, actor_id, actor_label, action, from_state, to_state,
     data, created_at)
SELECT run.id, CASE WHEN s.ord = 1 THEN run.intake_id END, NULL, NULL, 'system',
       CASE s.ord WHEN 1 THEN 'run.received' WHEN 2 THEN 'run.classify'
            ELSE CASE r.kind WHEN 'completed' THEN 'run.complete'
                 WHEN 'approval' THEN 'run.require_approval' WHEN 'blocked' THEN 'run.block'
                 WHEN 'rejected' THEN 'run.fail' ELSE 'run.hold' END END,
       CASE s.ord WHEN 1 THEN '' WHEN 2 THEN 'enriched'
            ELSE CASE r.kind WHEN 'completed' THEN 'executing'
                 WHEN 'rejected' THEN 'approval_required'
                 WHEN 'effect_unavailable' THEN 'executing'
                 WHEN 'effect_uncertain' THEN 'executing'
                 WHEN 'low_confidence' THEN 'classified'
                 WHEN 'approval' THEN 'classified' WHEN 'blocked' THEN 'classified'
                 ELSE 'enriched' END END,
       CASE s.ord WHEN 1 THEN 'received' WHEN 2 THEN 'classified' ELSE run.state END,
       CASE s.ord WHEN 1 THEN jsonb_build_object('fingerprint', run.fingerprint)
            ELSE jsonb_build_object('outcome', CASE s.ord WHEN 2 THEN '' ELSE run.outcome END)
       END,
       run.created_at + s.ord * interval '1 second'
FROM bench_request AS r JOIN automation_run AS run ON run.id = r.rid
JOIN (VALUES (1), (2), (3)) AS s (ord) ON s.ord <> 2 OR {CLASSIFIED};
INSERT INTO audit_auditevent
    (run_id, intake_id, approval_id, actor_id, actor_label, action, from_state, to_state,
     data, created_at)
SELECT a.run_id, NULL, a.id, %(approver)s, 'approver',
       CASE a.status WHEN 'approved' THEN 'approval.approve' ELSE 'approval.reject' END,
       'pending', a.status, jsonb_build_object('comment', ''), a.decided_at
FROM bench_request AS r JOIN approvals_approvalrequest AS a ON a.run_id = r.rid
WHERE a.status IN ('approved', 'rejected')
"""  # noqa: S608 - composed of this module's constants only

# Explicit ids were given to runs and intake records: their sequences move past them.
SEQUENCES = """
SELECT setval(pg_get_serial_sequence('automation_run', 'id'),
              (SELECT max(id) FROM automation_run));
SELECT setval(pg_get_serial_sequence('automation_intakerecord', 'id'),
              (SELECT max(id) FROM automation_intakerecord))
"""

STATEMENTS = (
    ("plan", PLAN),
    ("requests", PLAN_REQUEST),
    ("intake records", INTAKE),
    ("runs", RUNS),
    ("stage records", STAGES),
    ("checkpoints", CHECKPOINTS),
    ("classification attempts", CLASSIFICATIONS),
    ("effects", EFFECTS),
    ("effect attempts", EFFECT_ATTEMPTS),
    ("local effect records", LOCAL_RECORDS),
    ("approval requests", APPROVALS),
    ("approval decisions", DECISIONS),
    ("audit events", AUDIT),
    ("sequences", SEQUENCES),
)


def generate(
    cursor: CursorWrapper,
    *,
    runs: int,
    channel_id: int,
    approver_id: int,
    policy_version: str,
    now: datetime,
    progress: Any = None,
) -> None:
    """Add `runs` runs with their records, in the caller's transaction.

    New ids follow the highest existing ones, so the history can join rows already there.
    `progress(name, seconds)` is told of each statement as it finishes.
    """
    cursor.execute("DROP TABLE IF EXISTS bench_request, bench_plan")
    cursor.execute("SELECT coalesce(max(id), 0) FROM automation_run")
    run0 = cursor.fetchone()[0]
    cursor.execute("SELECT coalesce(max(id), 0) FROM automation_intakerecord")
    intake0 = cursor.fetchone()[0]
    params = {
        "runs": runs,
        "run0": run0,
        "intake0": intake0,
        "channel": channel_id,
        "approver": approver_id,
        "policy": policy_version,
        "queues": list(QUEUES),
        "start": now - HISTORY,
        # The newest run is an hour old: every run of the history is in the past.
        "step": (HISTORY - timedelta(hours=1)) / max(runs, 1),
    }
    for name, sql in STATEMENTS:
        started = time.perf_counter()
        for statement in sql.split(";\n"):
            cursor.execute(statement, params)
        if progress is not None:
            progress(name, time.perf_counter() - started)
    cursor.execute("DROP TABLE bench_request, bench_plan")
