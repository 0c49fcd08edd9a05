"""Runs, one of automation's concerns: the run record, its state machine, checkpoints and
stage timings (`models`)."""
