"""Helpers for tests and benchmarks: real ZooKeeper and etcd servers on loopback."""
