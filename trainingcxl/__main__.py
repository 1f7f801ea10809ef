"""``python -m trainingcxl <command>``: the same as the ``trainingcxl`` console script."""
import sys

from trainingcxl.cli import main

sys.exit(main())
