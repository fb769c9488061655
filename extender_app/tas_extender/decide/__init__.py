"""The decision core: policies, metrics and their cache, the rules and strategies, the load-aware
mode, and the Decider that answers filter and prioritize in kube-scheduler's wire format.
Imports nothing else of tas_extender: every other package builds on this one.
"""
