import sys

from trainingcxl.system.cli import main

sys.exit(main())
