"""The DPDK server generator: C for the server part, built against Debian's DPDK."""
