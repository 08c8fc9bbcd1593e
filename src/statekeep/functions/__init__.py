"""Functions: the function model and registry, the ``Context`` API, the Spark runtime."""
