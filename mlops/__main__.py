"""`python -m mlops` is the same as the `mlops` console script."""

import sys

from mlops.cli import main

if __name__ == "__main__":
    sys.exit(main())
