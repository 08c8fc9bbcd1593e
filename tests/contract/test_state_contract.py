"""The state contract suite (:mod:`statekeep.testing.contract.state`, shipped for third-party backends) on
every backend of conftest's ``BACKENDS``."""

from statekeep.testing.contract.state import *  # noqa: F401,F403 - the suite's tests and fixtures
