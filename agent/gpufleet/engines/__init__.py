"""The engines ops already operate, where gpufleet runs inside them instead of sweeping over SSH:
Slurm (node-local health check, drains, srun multinode smoke) and Ansible/AWX (gpu_facts results
rendered into the same report)."""
