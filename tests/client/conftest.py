"""Fixtures for the client tests: the real broker processes of tests/interop."""

# Imported rather than listed in `pytest_plugins`: pytest refuses to register
# tests/interop/conftest.py a second time when tests/interop is collected in the same run
# ("Plugin already registered under a different name"). A fixture imported into a conftest
# serves every test below it, so the names are used although nothing here reads them.
from tests.interop.conftest import broker, make_broker, shared_broker  # noqa: F401
