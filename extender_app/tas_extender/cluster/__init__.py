"""The cluster side: the TASPolicy controller (controller.py, over watch.py, reconcile.py and
status.py) and its CRD, leader election, the sync loop, the node annotator, and the Events and
status it reports. May import decide; nothing else of tas_extender.
"""
