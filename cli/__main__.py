"""`python -m cli ...`: the `minibroker` command line without the console script."""

import sys

from cli.main import main

sys.exit(main())
