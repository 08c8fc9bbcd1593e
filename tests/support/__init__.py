"""Helpers shared by the tests (importable as ``support``: pytest puts ``tests/`` on ``sys.path``).
Tests import helpers from here, never from another test module. The ``*_worker`` modules also run as
scripts, in their own processes, so they import nothing from this package."""
