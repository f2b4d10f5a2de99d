"""Conversation messages: what a ticket's contact and the organization said to each other."""
