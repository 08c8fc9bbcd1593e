"""The Spark driver: one streaming query per function, statekeep's Spark data sources, run status."""
