"""Screens own the workers that talk to the client and the conversation store."""
