"""Slurm as the engine: `nodecheck` (node-local mode), `drain` (drain/resume with a circuit
breaker), `smoke` (the multinode smoke test inside an allocation, through transport.srun)."""
