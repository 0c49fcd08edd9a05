"""Runs, one of automation's concerns: the run record, its state machine, checkpoints and
stage timings (`models`), and what writes and reads that record for every other part:
the journal of a run's history (`journal`), its row lock (`locking`), its next message
(`sending`), its log lines (`runlog`) and what is read from it (`payloads`: facts, reading,
binding, effect payload and key)."""
