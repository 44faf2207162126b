"""A small C syntax tree and its printer (used by the DPDK generator)."""
