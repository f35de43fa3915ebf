"""Everything the smoke test runs on the host: stdlib + torch only, Python >= 3.8.

The controller ships this directory as one zip (gpufleet.smoke.bundle) with a `__main__` that
calls ddp.main, so the modules find each other by relative import, wherever the zip lands.
Importing the package never imports torch: only ddp.main does, on the host.
"""
