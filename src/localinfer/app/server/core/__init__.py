"""What every dialect shares: which model a request means, and the stream writers."""
