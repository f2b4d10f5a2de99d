"""Inbox: conversation tickets, at most one open per contact."""
