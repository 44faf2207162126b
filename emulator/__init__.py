"""Executors of what nfc generates: the switch program (P4) run as a device would run it."""
