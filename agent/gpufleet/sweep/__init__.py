"""The sweep over the inventory: a bounded pool of workers (fanout), one result per host (sweep).

`sweep.sweep` connects to each host, collects its facts and runs the smoke test on the same
connection; `connect_and_probe` is the connect -> probe step that `localize` reuses.
"""
