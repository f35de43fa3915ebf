"""`python -m gpufleet.smoke.remote ARGS`: the same entry point the shipped zip has."""

import sys

from .ddp import main

sys.exit(main())
