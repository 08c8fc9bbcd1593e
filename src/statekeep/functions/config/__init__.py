"""What a function is and where it lives: its config model and validation, the registry in the metadata
store, the admin operations on functions and their state, loading user code, the typed executor spec."""
