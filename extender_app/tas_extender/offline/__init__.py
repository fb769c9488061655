"""Decisions without a cluster: `evaluate` (what a policy would do to a metrics file) and
`explain` (why a node passed or failed). May import decide; nothing else of tas_extender.
"""
