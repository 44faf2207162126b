"""The TNA (Tofino Native Architecture) generator."""
