"""Load-aware mode after crane-scheduler: pure decisions over node-load annotations."""
