"""Telemetry-aware scheduling: a kube-scheduler extender and a TASPolicy controller."""

__version__ = "0.1.0"
