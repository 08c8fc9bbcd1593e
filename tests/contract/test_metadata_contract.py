"""The metadata contract suite (:mod:`statekeep.testing.contract.metadata`, shipped for third-party backends) on
every backend of conftest's ``BACKENDS``."""

from statekeep.testing.contract.metadata import *  # noqa: F401,F403 - the suite's tests and fixtures
