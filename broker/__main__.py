"""`python -m broker [serve] ...`: the broker alone, without the tools package."""

import sys

from broker.main import main

argv = sys.argv[1:]
sys.exit(main(argv[1:] if argv[:1] == ["serve"] else argv))
