"""`python -m ember ...`: the `ember` command, for an environment whose scripts are not on PATH."""

import sys

from ember._cli import main

sys.exit(main())
