"""Recovery, one of automation's concerns: recovery batches and their actions, and policy
simulations (`models`)."""
