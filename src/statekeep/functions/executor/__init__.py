"""The executor: the one record path (``RecordPath``) and the ``Context`` a function sees."""
