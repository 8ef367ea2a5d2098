"""`python -m spark_jobs ...`: the same as `minibroker analyze ...` (spark_jobs.cli)."""

import sys

from spark_jobs.cli import main

sys.exit(main(sys.argv[1:]))
