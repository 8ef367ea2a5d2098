"""`python -m tools.cli ...`: the `minibroker` command line under the module name it had
before it became its own top package, kept because scripts and tests outside the project
run it verbatim. The command line itself is cli.main.

Only a run as `__main__` hands over, and by name at run time: tools/ sits below cli/ in the
import graph (docs/ARCHITECTURE.md §2), so nothing in tools/ imports cli/.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("cli", run_name="__main__", alter_sys=True)
