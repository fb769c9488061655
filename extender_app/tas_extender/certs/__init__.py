"""Certificates: renewing the serving certificate's Secret, reloading it without a restart, and
warning ahead of a certificate's expiry. May import decide; nothing else of tas_extender.
"""
