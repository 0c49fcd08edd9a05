"""The pipeline: the steps a run takes from received to done, and what follows a reading.

`services.run_advance` validates, normalizes, enriches, reads, decides and delivers;
`operations` re-decides, resumes and sweeps; `shadow` runs the channel's shadow classifiers
and promotes one; `evaluation` replays the reference case set through all of it.
"""
