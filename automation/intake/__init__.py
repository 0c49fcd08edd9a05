"""Intake, one of automation's concerns: customers, intake channels, raw intake records and
API tokens (`models`)."""
