"""`python -m mlops` is the same as the `mlops` console script."""

import sys

from mlops.cli import main

sys.exit(main())
