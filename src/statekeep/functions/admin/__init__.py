"""Running functions for the server: start, stop, restart, trigger, and the standalone worker."""
