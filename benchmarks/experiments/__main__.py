"""``python -m benchmarks.experiments ...`` (see ``benchmarks.experiments.cli``)."""

import sys

from benchmarks.experiments.cli import main

sys.exit(main())
