"""`python -m verify` is `quantfloor`."""

import sys

from verify.cli import main

if __name__ == "__main__":  # not when a spawned worker imports this module again
    sys.exit(main())
