"""The optional dependencies: which extra of pyproject.toml brings each, and the one-line
failure when one is missing.

Owns: `EXTRAS` (extra -> the modules `minibroker` imports from it), `require(prog, extra,
modules)` (import them now, so that a missing one fails before any work starts) and
`missing_extra(error)` (the extra to name for a ModuleNotFoundError that escaped anyway).

`pip install minibroker` brings what `minibroker serve`, the client and the ops tools need;
`minibroker analyze` needs the `spark` extra and `minibroker bench` the `bench` extra. A
missing module is one line naming the fix, `pip install 'minibroker[spark]'`, and exit
status 2 (a usage problem, as argparse's), never a traceback.
"""

from __future__ import annotations

import importlib
from typing import Iterable

__all__ = ["EXTRAS", "MissingExtra", "missing_extra", "require", "EXIT_MISSING"]

EXIT_MISSING = 2

# extra -> {module imported: distribution that provides it}; kept in step with pyproject.toml
EXTRAS: dict[str, dict[str, str]] = {
    "spark": {"pyspark": "pyspark", "pyarrow": "pyarrow", "pandas": "pandas",
              "matplotlib": "matplotlib"},
    "bench": {"confluent_kafka": "confluent-kafka", "kafka": "kafka-python",
              "aiokafka": "aiokafka", "matplotlib": "matplotlib"},
}


class MissingExtra(Exception):
    """An optional module cannot be imported; str() is the line to print."""

    def __init__(self, prog: str, extra: str, module: str, reason: str | None = None):
        distribution = EXTRAS.get(extra, {}).get(module, module)
        what = (f"{distribution} is not installed" if reason is None
                else f"{distribution} cannot be imported ({reason})")
        super().__init__(f"{prog}: {what}; pip install 'minibroker[{extra}]'")
        self.extra, self.module = extra, module


def require(prog: str, extra: str, modules: Iterable[str] | None = None) -> None:
    """Import `modules` (default: all of the extra's), raising MissingExtra for the first
    that fails. Importing rather than looking for the module finds a broken install too."""
    for module in (EXTRAS[extra] if modules is None else modules):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            top = (e.name or module).split(".")[0]
            reason = None if top == module else f"it needs {top}, which is not installed"
            raise MissingExtra(prog, extra, module, reason) from None
        except ImportError as e:
            raise MissingExtra(prog, extra, module, " ".join(str(e).split()) or
                               type(e).__name__) from None


def missing_extra(prog: str, error: ModuleNotFoundError, extras: Iterable[str]
                  ) -> MissingExtra | None:
    """The MissingExtra for a ModuleNotFoundError of a module one of `extras` provides (the
    first extra that names it), else None: a module of ours missing is a bug to show."""
    top = (error.name or "").split(".")[0]
    for extra in extras:
        if top in EXTRAS[extra]:
            return MissingExtra(prog, extra, top)
    return None
