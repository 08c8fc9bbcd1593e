"""The changelog contract suite (:mod:`statekeep.testing.contract.changelog`, shipped for third-party backends) on
every backend of conftest's ``BACKENDS``."""

from statekeep.testing.contract.changelog import *  # noqa: F401,F403 - the suite's tests and fixtures
