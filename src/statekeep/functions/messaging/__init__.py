"""Pulsar messages and topics: the one output sink (file naming, durability, publish order), topic
names and roots, message envelopes and the writers of outputs, logs and dead letters."""
