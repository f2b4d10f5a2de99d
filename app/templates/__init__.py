"""Message templates registered with the messaging platform, and its template library."""
