"""`python -m verify` is `quantfloor`."""

import sys

from verify.cli import main

sys.exit(main())
