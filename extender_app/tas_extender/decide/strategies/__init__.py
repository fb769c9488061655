"""The four TAS strategies, each a pure function of (policy, snapshot, nodes)."""
