"""The v1model twin of the switch program, for bmv2's simple_switch."""
