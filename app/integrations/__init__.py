"""Upstream platforms, each behind one interface with a real client and a simulator."""
