"""gatehouse_receive_event: an accepted event's five rows written by one call.

The common request (a valid JSON event the policy lets in) is written in one round trip
instead of eleven: its raw intake record, its run at `received`, the run's intake stage
record and audit row, and its first message. Every column is named here, with the value
the ORM writes for it (the model's default where the caller gives none); a column left
out gets its database default. It is explicit SQL, versioned with the schema: a change to
the rows an accepted event starts with is a new migration that replaces this function.
`tests/automation/pipeline/test_throughput.py` compares every column it writes with the rows the
ORM writes for the same event, and fails on a column of these tables that it neither
writes nor leaves to a database default.

One statement, so one transaction: a taken event id (the run's unique index) refuses the
whole call and nothing is written; the caller then takes the ORM's way, which answers
with the run that owns the id (automation.services.intake).
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION gatehouse_receive_event(
    p_intake_id bigint,
    p_run_id bigint,
    p_channel_id bigint,
    p_raw bytea,
    p_content_type text,
    p_source text,
    p_raw_sha256 text,
    p_event_id text,
    p_identity_scope text,
    p_normalized jsonb,
    p_fingerprint text,
    p_workflow_version text,
    p_classifier_version text,
    p_prompt_version text,
    p_stage_started_at timestamptz,
    p_stage_finished_at timestamptz,
    p_stage_duration_ms integer,
    p_message_key text,
    p_message_payload text,
    p_now timestamptz
) RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO automation_intakerecord (
        id, channel_id, raw, content_type, source, admission_error, received_at,
        raw_sha256, size, refused
    ) VALUES (
        p_intake_id, p_channel_id, p_raw, p_content_type, p_source, '', p_now,
        p_raw_sha256, octet_length(p_raw), false
    );
    INSERT INTO automation_run (
        id, channel_id, event_id, identity_scope, claims_identity, intake_id, replay_of_id,
        reply_to_event_id, thread_parent_id, state, outcome, claimed_at, failure_field,
        failure_detail, normalized, fingerprint, enrichment, workflow_version,
        classifier_version, prompt_version, policy_version, classification, category,
        reason_code, confidence, route, effect_name, rules, signals_reviewed, queue,
        queued_at, owner_id, classify_attempts, classify_attempts_spent, next_attempt_at,
        lease_expires_at, dispatched_at, created_at, updated_at, finished_at, version
    ) VALUES (
        p_run_id, p_channel_id, p_event_id, p_identity_scope, true, p_intake_id, NULL,
        '', NULL, 'received', '', NULL, '',
        '', p_normalized, p_fingerprint, '{}'::jsonb, p_workflow_version,
        p_classifier_version, p_prompt_version, '', NULL, '',
        '', NULL, '', '', '[]'::jsonb, '[]'::jsonb, '',
        NULL, NULL, 0, 0, NULL,
        NULL, p_now, p_now, p_now, NULL, 0
    );
    INSERT INTO automation_stagerecord (
        run_id, stage, attempt, started_at, finished_at, duration_ms, outcome, error_class
    ) VALUES (
        p_run_id, 'intake', 1, p_stage_started_at, p_stage_finished_at, p_stage_duration_ms,
        'accepted', ''
    );
    INSERT INTO audit_auditevent (
        run_id, intake_id, approval_id, actor_id, actor_label, action, from_state, to_state,
        data, created_at
    ) VALUES (
        p_run_id, p_intake_id, NULL, NULL, 'system', 'run.received', '', 'received',
        jsonb_build_object('fingerprint', p_fingerprint), p_now
    );
    INSERT INTO django_q_ormq (key, payload, lock) VALUES (p_message_key, p_message_payload, p_now);
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS gatehouse_receive_event(
    bigint, bigint, bigint, bytea, text, text, text, text, text, jsonb, text, text, text, text,
    timestamptz, timestamptz, integer, text, text, timestamptz
);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0029_intake_size_refused"),
        ("audit", "0004_partial_link_indexes"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
