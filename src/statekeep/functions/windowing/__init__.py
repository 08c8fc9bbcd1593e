"""Event time: watermarks, windows, timers and TTLs, and the run of one (batch, partition) with time."""
