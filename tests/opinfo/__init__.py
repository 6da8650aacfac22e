"""ember's OpInfo sweep: every op of torch's `op_db`, forward and backward, compiled by ember and compared with eager.

`cases.py` runs one sample of one op (the comparison rules live there), `sweep.py` runs shards of op_db in worker
processes, `expected.py` reads the expected-failures list, `report.py` writes the summary. Run it with
`python -m tests.opinfo run --shard 0/8` from the repository root, or `nox -s opinfo -- --shard 0/8`.
"""
