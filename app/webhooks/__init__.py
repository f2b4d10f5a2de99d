"""Webhook subscriptions: event names, URL safety (SSRF guard) and delivery signatures."""
