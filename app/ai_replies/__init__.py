"""AI replies on WhatsApp: a channel's agent answers its inbound messages.

The service registers its inbound-message listener with the conversations domain when imported;
importing the package does it, so every process that loads the tables (app/tables.py imports
each domain's models) hears the webhooks' messages.
"""

from app.ai_replies import service as service
