"""The nfc command line: the one place that wires front end, compiler, targets and runtime."""
